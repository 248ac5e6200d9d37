package configerr

import (
	"errors"
	"fmt"
	"testing"
)

func TestError(t *testing.T) {
	err := fmt.Errorf("peer x: %w", New("batcher.Config.MaxBuffer", "must be > 0, got %d", 0))
	if got, want := err.Error(), "peer x: batcher.Config.MaxBuffer: must be > 0, got 0"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	var e *Error
	if !errors.As(err, &e) || e.Field != "batcher.Config.MaxBuffer" || e.Problem != "must be > 0, got 0" {
		t.Fatalf("errors.As = %+v", e)
	}
}
