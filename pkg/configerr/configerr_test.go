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

func TestWrap(t *testing.T) {
	cause := errors.New("bind: address already in use")
	for _, tc := range []struct {
		name string
		err  *Error
		want string
	}{
		{"with words", Wrap("sidecar.Config.AppAddr", cause, "listen on %s", "127.0.0.1:7070"),
			"sidecar.Config.AppAddr: listen on 127.0.0.1:7070: bind: address already in use"},
		{"the cause alone", Wrap("sidecar.Config.AppAddr", cause, ""), "sidecar.Config.AppAddr: bind: address already in use"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := fmt.Errorf("start: %w", tc.err)
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("Error() = %q, want %q", got, tc.want)
			}
			if !errors.Is(err, cause) {
				t.Errorf("errors.Is(%v, cause) = false", err)
			}
			var e *Error
			if !errors.As(err, &e) || e.Field != "sidecar.Config.AppAddr" {
				t.Errorf("errors.As = %+v", e)
			}
		})
	}
	if New("a.Config.B", "bad").Unwrap() != nil {
		t.Error("New(...).Unwrap() != nil")
	}
}
