package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// pebbleLogger sends pebble's logs to the store's logger: Infof (recovery at Open,
// mostly) at Info, Errorf at Error. Fatalf, which pebble calls on an error it cannot
// go on from (a failed write of its log or MANIFEST, a broken invariant) and expects
// not to return, logs at Error and panics with a fatalPanic, which the store call
// that ran into it recovers (Store.guard): the store fails, the process goes on.
type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.log.Info(fmt.Sprintf(format, args...), "component", "pebble")
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.log.Log(context.Background(), slog.LevelError, msg, "component", "pebble", "fatal", true)
	if !strings.HasPrefix(msg, "pebble: ") {
		msg = "pebble: " + msg
	}
	panic(fatalPanic{msg: msg})
}
