// Package internal_test checks the one rule of the internal/ tree: its packages sit
// below the product's, so none imports one under pkg/. The load generator is the
// exception: it drives the product as a client does.
package internal_test

import (
	"os/exec"
	"strings"
	"testing"
)

// mayImportPkg are the packages under internal/ that may import one under pkg/.
var mayImportPkg = map[string]bool{
	"github.com/fanout/fanout/internal/loadgen": true,
}

func TestInternalImportsNothingUnderPkg(t *testing.T) {
	out, err := exec.Command("go", "list", "-test", "-f",
		`{{.ImportPath}} {{join .Imports " "}}`, "github.com/fanout/fanout/internal/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	seen := 0
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		// -test lists a package's test variants too: "p [p.test]", "p_test [p.test]",
		// "p.test"; each is checked under the package it tests.
		pkg := strings.TrimSuffix(strings.TrimSuffix(fields[0], "_test"), ".test")
		imports := fields[1:]
		if len(fields) > 1 && strings.HasPrefix(fields[1], "[") {
			imports = fields[2:]
		}
		seen++
		if mayImportPkg[pkg] {
			continue
		}
		for _, imp := range imports {
			if strings.HasPrefix(imp, "github.com/fanout/fanout/pkg/") {
				t.Errorf("%s imports %s: a package under internal/ imports none under pkg/ (only %v may)", fields[0], imp, keys(mayImportPkg))
			}
		}
	}
	if seen < 5 {
		t.Fatalf("go list listed %d packages under internal/; want them all:\n%s", seen, out)
	}
}

func keys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
