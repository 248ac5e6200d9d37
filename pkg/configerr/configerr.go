// Package configerr is the error a package's Config.validate returns for a field it
// refuses: which field, by its path from the package ("batcher.Config.MaxBuffer"), and
// what is wrong with the value ("must be > 0, got 0").
//
// A library names its own fields, never the flags of some program that fills its
// Config. A program that does (cmd/sidecar) finds these errors with errors.As and
// tells its user the flag to fix instead, from a table of its own.
package configerr

import "fmt"

// Error is one refused field of a Config.
type Error struct {
	// Field is the field's path: the package, the type and the field, followed by a
	// nested struct's field ("fanout.Config.State.MaxKeys").
	Field string
	// Problem says what is wrong with the value. It names any other field it depends
	// on by its path too ("must be <= batcher.Config.MaxBuffer (10), got 11").
	Problem string
}

// New returns the Error for field with Problem fmt.Sprintf(format, args...).
func New(field, format string, args ...any) *Error {
	return &Error{Field: field, Problem: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string { return e.Field + ": " + e.Problem }
