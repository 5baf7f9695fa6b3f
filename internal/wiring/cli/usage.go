package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"
)

// SetUsage makes fs's -h text open with summary, one sentence that says
// what the binary is, before the list of its flags.
func SetUsage(fs *flag.FlagSet, summary string) {
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "%s\n\nUsage: %s [flags]\n\nFlags:\n", summary, fs.Name())
		fs.PrintDefaults()
	}
}

// Required refuses an empty value of flag name; reason says what the flag
// is for and how else it may be set.
func Required(name, value, reason string) error {
	if value != "" {
		return nil
	}
	return &FlagError{Flag: name, Reason: "is required: " + reason}
}

// NotNegative refuses a negative duration given to flag name.
func NotNegative(name string, d time.Duration) error {
	if d >= 0 {
		return nil
	}
	return &FlagError{Flag: name, Value: d.String(), Reason: "must not be negative"}
}

// Positive refuses a value of flag name that is not greater than zero.
func Positive(name string, v float64) error {
	if v > 0 {
		return nil
	}
	return &FlagError{Flag: name, Value: strconv.FormatFloat(v, 'g', -1, 64), Reason: "must be greater than zero"}
}

// ReportUsage prints the usage errors err joins (each names its flag) on w,
// one a line after the binary's name, and a pointer to -h. It returns
// [ExitUsage], the code to exit with.
func ReportUsage(w io.Writer, name string, err error) int {
	for _, e := range flatten(err) {
		fmt.Fprintf(w, "%s: %v\n", name, e)
	}
	fmt.Fprintf(w, "Run %s -h for its flags.\n", name)
	return ExitUsage
}

// flatten lists the errors err joins (errors.Join), nested joins
// included, each once; a [*FlagError] is a leaf even though it unwraps to
// several errors.
func flatten(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if _, leaf := err.(*FlagError); leaf || !ok {
		return []error{err}
	}
	var out []error
	seen := map[string]bool{}
	for _, e := range j.Unwrap() {
		for _, leaf := range flatten(e) {
			if msg := leaf.Error(); !seen[msg] {
				seen[msg] = true
				out = append(out, leaf)
			}
		}
	}
	return out
}

// IsUsage reports whether err is a usage error: a flag, or its value, is
// wrong.
func IsUsage(err error) bool { return errors.Is(err, ErrFlag) }
