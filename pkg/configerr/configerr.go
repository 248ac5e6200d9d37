// Package configerr is the error a package's Config.validate returns for a field it
// refuses: which field, by its path from the package ("batcher.Config.MaxBuffer"), and
// what is wrong with the value ("must be > 0, got 0"). A package that acts on a field's
// value (opens the file it names, listens on the address) returns one too when that
// fails, with the failure as its Err ("sidecar.Config.DataDir: ...").
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
	// Err is the error the Problem was found through, if any (a listener that could
	// not bind, a file that could not be opened); Problem already says it in words.
	// Unwrap returns it, for errors.Is and errors.As.
	Err error
}

// New returns the Error for field with Problem fmt.Sprintf(format, args...).
func New(field, format string, args ...any) *Error {
	return &Error{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Wrap returns the Error for field that failed with err: Problem is
// fmt.Sprintf(format, args...) followed by ": " and err's text (or err's text alone
// when format is empty), and Err is err.
func Wrap(field string, err error, format string, args ...any) *Error {
	problem := err.Error()
	if format != "" {
		problem = fmt.Sprintf(format, args...) + ": " + problem
	}
	return &Error{Field: field, Problem: problem, Err: err}
}

func (e *Error) Error() string { return e.Field + ": " + e.Problem }

// Unwrap returns Err (nil for a refused value).
func (e *Error) Unwrap() error { return e.Err }
