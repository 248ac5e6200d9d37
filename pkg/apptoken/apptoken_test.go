package apptoken

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func bearer(tok string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+tok))
}

func TestCheckAndRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := Open(Config{Path: path, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	if _, err := tok.Check(bearer("s3cret")); err != nil {
		t.Errorf("the right token: %v", err)
	}
	for name, ctx := range map[string]context.Context{
		"a wrong token":    bearer("s3cre"),
		"no metadata":      context.Background(),
		"another scheme":   metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Basic s3cret")),
		"the token padded": bearer("s3cret "),
		"an empty bearer":  bearer(""),
	} {
		if _, err := tok.Check(ctx); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: %v, want UNAUTHENTICATED", name, err)
		}
	}

	// Rotation; an empty file (a rotation half-way) keeps the old token.
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := tok.Check(bearer("s3cret")); err != nil {
		t.Errorf("after the file was emptied: %v, want the old token kept", err)
	}
	if err := os.WriteFile(path, []byte("n3w"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for tok.Reloads() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := tok.Check(bearer("n3w")); err != nil {
		t.Errorf("the new token: %v", err)
	}
	if _, err := tok.Check(bearer("s3cret")); err == nil {
		t.Error("the old token still works after the rotation")
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	empty, big := filepath.Join(dir, "empty"), filepath.Join(dir, "big")
	_ = os.WriteFile(empty, []byte(" \n"), 0o600)
	_ = os.WriteFile(big, []byte(strings.Repeat("x", MaxBytes+1)), 0o600)
	for path, want := range map[string]string{
		empty:                      "is empty",
		big:                        "larger than 4096 bytes",
		filepath.Join(dir, "nope"): "no such file",
	} {
		if _, err := Open(Config{Path: path}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%s): %v, want %q", filepath.Base(path), err, want)
		}
	}
}
