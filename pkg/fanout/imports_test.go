package fanout_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNodeKnowsNoGRPC: the node's package imports nothing of gRPC (its edge is
// pkg/grpcapi) and nothing of NATS (a broker-backed transport lives in a package of
// its own): go list's direct imports of its non-test files. The generated message
// types (gen/fanout/v1) and protobuf are the node's vocabulary and are fine.
func TestNodeKnowsNoGRPC(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, "github.com/fanout/fanout/pkg/fanout").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	imports := strings.Fields(string(out))
	if len(imports) < 5 {
		t.Fatalf("go list gave %d imports of pkg/fanout; want them all:\n%s", len(imports), out)
	}
	for _, imp := range imports {
		for _, banned := range []string{"google.golang.org/grpc", "github.com/nats-io/"} {
			if imp == banned || strings.HasPrefix(imp, strings.TrimSuffix(banned, "/")+"/") {
				t.Errorf("pkg/fanout imports %s: the node uses nothing of gRPC or NATS (its gRPC edge is pkg/grpcapi)", imp)
			}
		}
	}
}
