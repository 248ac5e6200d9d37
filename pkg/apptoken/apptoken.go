// Package apptoken is the bearer token local apps present on the app listener: read
// from a file (a Kubernetes secret mounted in the pod), re-read while the node runs,
// and compared in constant time.
//
// The token is the file's content without surrounding whitespace. An app sends it as
// gRPC metadata "authorization: Bearer <token>". The health service is left open so
// that Kubernetes' gRPC probes, which send no metadata, work (package main wires
// that).
package apptoken

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MaxBytes bounds the token file: a token is a secret of some dozens of bytes, and a
// file of megabytes is a mistake (the wrong path).
const MaxBytes = 4096

// DefaultInterval: a rotated token takes effect within a second.
const DefaultInterval = time.Second

// Config configures a Token.
type Config struct {
	Path     string
	Interval time.Duration // 0: DefaultInterval
	Logger   *slog.Logger  // nil discards
}

// Token holds the current token and re-reads its file.
type Token struct {
	cfg     Config
	log     *slog.Logger
	cur     atomic.Pointer[[]byte]
	reloads atomic.Uint64
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// Open reads the token file and starts re-reading it every Interval. Close stops it.
func Open(cfg Config) (*Token, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b, err := read(cfg.Path)
	if err != nil {
		return nil, err
	}
	t := &Token{cfg: cfg, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	t.cur.Store(&b)
	go t.run()
	return t, nil
}

func read(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	if len(b) > MaxBytes {
		return nil, fmt.Errorf("token file %s: larger than %d bytes; is it the right file?", path, MaxBytes)
	}
	tok := bytes.TrimSpace(b)
	if len(tok) == 0 {
		return nil, fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}

func (t *Token) run() {
	defer close(t.done)
	tick := time.NewTicker(t.cfg.Interval)
	defer tick.Stop()
	var lastErr string
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
		}
		b, err := read(t.cfg.Path)
		if err != nil {
			if err.Error() != lastErr {
				t.log.Warn("app token file unusable; keeping the previous token", "err", err.Error())
				lastErr = err.Error()
			}
			continue
		}
		lastErr = ""
		if !bytes.Equal(b, *t.cur.Load()) {
			t.cur.Store(&b)
			t.reloads.Add(1)
			t.log.Info("app token reloaded", "path", t.cfg.Path)
		}
	}
}

// Reloads counts the token's changes.
func (t *Token) Reloads() uint64 { return t.reloads.Load() }

// Close stops re-reading. It is safe to call more than once.
func (t *Token) Close() {
	t.once.Do(func() { close(t.stop) })
	<-t.done
}

var errBadToken = errors.New("wrong token")

// Check is the auth interceptor's AuthFunc: the call must carry
// "authorization: Bearer <token>" with the current token.
func (t *Token) Check(ctx context.Context) (context.Context, error) {
	got, err := auth.AuthFromMD(ctx, "bearer")
	if err != nil {
		return nil, status.Error(codes.Unauthenticated,
			"this sidecar's app listener needs a token: send gRPC metadata \"authorization: Bearer <token>\" (the content of its --app-token-file)")
	}
	if subtle.ConstantTimeCompare([]byte(got), *t.cur.Load()) != 1 {
		return nil, status.Error(codes.Unauthenticated, errBadToken.Error()+": the bearer token is not this sidecar's --app-token-file")
	}
	return ctx, nil
}
