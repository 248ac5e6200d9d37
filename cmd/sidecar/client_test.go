package main

import (
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
