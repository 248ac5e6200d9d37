// Package testbin finds or builds the external programs that tests start.
//
// Find looks up a program a system package brings (dnsmasq, Debian's nats-server,
// promtool, prometheus, node). test/deps.sh installs every one of them, so a missing
// one fails the test, never skips it, and the failure says how to get it.
//
// BuildTool builds a Go program pinned as a tool in the product's tools/go.mod (the
// nats-server release the JetStream tests run, say) with the module proxy alone. A
// test binary calls it once, from TestMain, into a directory it removes at the end;
// Go's build cache makes every build after the first a link.
//
// ProcAttr is the SysProcAttr of every server a test starts, so that none outlives a
// test process that dies. AllStopped tells when a process SIGSTOP froze has stopped.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// Find returns the path of the program name: on PATH, else in /usr/sbin or /sbin,
// where Debian installs daemons such as dnsmasq and nats-server and which a user's
// PATH may lack. If there is none it fails t, naming what installs it (from, e.g.
// "Debian's dnsmasq-base package").
func Find(t testing.TB, name, from string) string {
	t.Helper()
	return find(t, name, from, "/usr/sbin", "/sbin")
}

func find(t testing.TB, name, from string, sbin ...string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range sbin {
		p := dir + "/" + name
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	t.Fatalf("%s not found on PATH, in /usr/sbin or /sbin: run `bash test/deps.sh` (it installs %s), or `make test`, which does", name, from)
	return ""
}

// productModule is the module path of the product, whose checkout holds tools/go.mod.
const productModule = "github.com/fanout/fanout"

// ProductDir returns the directory of the product's checkout: the module
// github.com/fanout/fanout itself, or the one a test module (test/) replaces it with.
// It asks the go command, from the current directory (a test's package directory).
func ProductDir() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", productModule).Output()
	if err != nil {
		return "", fmt.Errorf("testbin: go list -m %s: %w", productModule, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// BuildTool builds the Go program pkg, which tools/go.mod pins as a tool, into dir and
// returns the binary's path, dir/<name> where name is pkg's last element that is not
// a major version ("github.com/nats-io/nats-server/v2" → "nats-server"). The build
// runs in the product's checkout with -modfile=tools/go.mod, so it takes the pinned
// release and checks it against tools/go.sum; the go command's output goes to
// stderr. A test binary calls it once, from TestMain.
func BuildTool(dir, pkg string) (string, error) {
	product, err := ProductDir()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, toolName(pkg))
	args := []string{"build", "-modfile=tools/go.mod", "-o", out, pkg}
	cmd := exec.Command("go", args...)
	cmd.Dir = product
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("testbin: go %s in %s: %w", strings.Join(args, " "), product, err)
	}
	return out, nil
}

// toolName is the name go build gives pkg's binary: its last element, or the one
// before if that is a major version ("v2").
func toolName(pkg string) string {
	name := path.Base(pkg)
	if v, ok := strings.CutPrefix(name, "v"); ok && v != "" && strings.Trim(v, "0123456789") == "" {
		name = path.Base(path.Dir(pkg))
	}
	return name
}
