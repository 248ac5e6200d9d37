package main

import (
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
)

func TestCodeName(t *testing.T) {
	for c, want := range map[codes.Code]string{
		codes.OK:                "OK",
		codes.Canceled:          "CANCELLED",
		codes.OutOfRange:        "OUT_OF_RANGE",
		codes.Unavailable:       "UNAVAILABLE",
		codes.Unauthenticated:   "UNAUTHENTICATED",
		codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
		codes.Code(99):          "CODE_99",
	} {
		if got := codeName(c); got != want {
			t.Errorf("codeName(%d) = %q, want %q", c, got, want)
		}
	}
}

// TestCodeNamesMatchGRPC checks the whole table against the names grpc-go parses.
func TestCodeNamesMatchGRPC(t *testing.T) {
	for i, name := range codeNames {
		var c codes.Code
		if err := c.UnmarshalJSON([]byte(`"` + name + `"`)); err != nil || c != codes.Code(i) {
			t.Errorf("codeNames[%d] = %q, which grpc-go reads as %v (%v)", i, name, c, err)
		}
	}
}

// TestClientAddresses checks --addr: a unix socket works, and every command says so
// when nobody serves the address (port 1).
func TestClientAddresses(t *testing.T) {
	f := &fakeApp{submit: accepted(7, 1)}
	sock := f.start(t, filepath.Join(t.TempDir(), "app.sock"))
	if !strings.HasPrefix(sock, "unix://") {
		t.Fatalf("the fake serves on %s, want a unix:// address", sock)
	}
	out, _, err := runCLI(testContext(t), []string{"submit", "--addr", sock, "register#x", "v"}, "")
	checkErr(t, err, "")
	if out != "accepted register#x version 7 revision 1\n" {
		t.Errorf("over %s: %q", sock, out)
	}

	for _, args := range [][]string{{"submit", "register#x"}, {"get", "a"}, {"watch"}, {"status"}} {
		t.Run(args[0], func(t *testing.T) {
			_, _, err := runCLI(testContext(t), append(args, "--addr", "127.0.0.1:1"), "")
			checkErr(t, err, "127.0.0.1:1: UNAVAILABLE: ")
			checkErr(t, err, "(is a sidecar serving on --addr?)")
		})
	}
}
