package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIReferenceIsCurrent fails when docs/CLI.md is not what `sidecar docs` prints:
// a flag was added, renamed or given another default or usage text without `make docs`.
func TestCLIReferenceIsCurrent(t *testing.T) {
	var got bytes.Buffer
	if err := writeReference(&got, newRootCmd()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", cliReferencePath)
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: run `make docs` to write it", err)
	}
	if got.String() != string(want) {
		gl, wl := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < max(len(gl), len(wl)); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("%s is stale: run `make docs` and commit it. First difference, line %d:\nfile:      %q\ngenerated: %q", cliReferencePath, i+1, w, g)
			}
		}
	}
}

// TestCLIReferenceNamesEveryServeFlag: the reference lists every flag of serve, each
// with its variable, so a user can look up any FANOUT_* a manifest sets.
func TestCLIReferenceNamesEveryServeFlag(t *testing.T) {
	var b bytes.Buffer
	root := newRootCmd()
	if err := writeReference(&b, root); err != nil {
		t.Fatal(err)
	}
	serve, _, err := root.Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range flagNames(serve.LocalFlags()) {
		if !strings.Contains(b.String(), "`--"+name+"`") || !strings.Contains(b.String(), "`"+envName(name)+"`") {
			t.Errorf("the reference lacks --%s or %s", name, envName(name))
		}
	}
}
