package testbin

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fatalT records Fatalf instead of ending the test.
type fatalT struct {
	testing.TB
	failed string
}

func (f *fatalT) Helper()                        {}
func (f *fatalT) Fatalf(format string, a ...any) { f.failed = fmt.Sprintf(format, a...) }

func TestFind(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "fanout-testbin-prog")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	if got := Find(t, "fanout-testbin-prog", "nothing"); got != prog {
		t.Fatalf("on PATH: %q, want %q", got, prog)
	}

	sbinDir := t.TempDir()
	inSbin := filepath.Join(sbinDir, "fanout-testbin-daemon")
	if err := os.WriteFile(inSbin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := find(t, "fanout-testbin-daemon", "nothing", sbinDir); got != inSbin {
		t.Fatalf("in sbin: %q, want %q", got, inSbin)
	}

	f := &fatalT{TB: t}
	if got := Find(f, "fanout-testbin-missing", "Debian's example package"); got != "" ||
		!strings.Contains(f.failed, "fanout-testbin-missing not found") || !strings.Contains(f.failed, "Debian's example package") ||
		!strings.Contains(f.failed, "test/deps.sh") {
		t.Fatalf("missing: %q, failure %q", got, f.failed)
	}
}

func TestToolName(t *testing.T) {
	for _, c := range []struct{ pkg, want string }{
		{"github.com/nats-io/nats-server/v2", "nats-server"},
		{"github.com/fullstorydev/grpcurl/cmd/grpcurl", "grpcurl"},
		{"example.com/tools/v", "v"},
		{"example.com/tools/v2x", "v2x"},
		{"example.com/vtool/v12", "vtool"},
	} {
		t.Run(c.pkg, func(t *testing.T) {
			if got := toolName(c.pkg); got != c.want {
				t.Fatalf("toolName(%q) = %q, want %q", c.pkg, got, c.want)
			}
		})
	}
}

func TestProductDir(t *testing.T) {
	dir, err := ProductDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tools", "go.mod")); err != nil {
		t.Fatalf("ProductDir %s has no tools/go.mod: %v", dir, err)
	}
}
