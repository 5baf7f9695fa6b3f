package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"k8s.io/klog/v2"
)

// Log formats accepted by -log-format.
const (
	FormatText = "text"
	FormatJSON = "json"
)

// ErrFlag: a common flag has a value outside its range.
var ErrFlag = errors.New("cli: bad flag value")

// FlagError names the flag and the value refused; it matches [ErrFlag],
// and Err when set. Its message is for the person who typed the flag: the
// flag as written on the command line, the value, and why it is refused.
type FlagError struct {
	Flag, Value, Reason string
	// Err is the cause, when another package refused the value, or nil.
	Err error
}

func (e *FlagError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("-%s %s", e.Flag, e.Reason)
	}
	return fmt.Sprintf("-%s=%s: %s", e.Flag, e.Value, e.Reason)
}

// Unwrap returns [ErrFlag] and Err.
func (e *FlagError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrFlag}
	}
	return []error{ErrFlag, e.Err}
}

// Flags are the flags every binary shares. Create them with [Register].
type Flags struct {
	// ShowVersion is -version: print [BuildVersion] and exit.
	ShowVersion bool
	// Format is -log-format: "text" or "json".
	Format string
	// Level is -log-level: the least severe slog level logged.
	Level slog.Level
	// Verbosity is -v: klog's verbosity; a value above 0 also lowers the
	// level to -Verbosity when that is more verbose.
	Verbosity int
}

// Register adds -version, -log-format, -log-level and -v to fs and
// returns the values they set once fs is parsed.
func Register(fs *flag.FlagSet) *Flags {
	f := &Flags{Format: FormatText}
	fs.BoolVar(&f.ShowVersion, "version", false, "print the version and VCS revision and exit")
	fs.StringVar(&f.Format, "log-format", FormatText, `log format: "text" or "json"`)
	fs.TextVar(&f.Level, "log-level", slog.LevelInfo, "least severe level logged: debug, info, warn or error")
	fs.IntVar(&f.Verbosity, "v", 0, "log verbosity: client-go's klog level; above 0 also logs debug records of that depth")
	return f
}

// EffectiveLevel is the level the handler keeps: Level, lowered to
// -Verbosity when -v asks for more.
func (f *Flags) EffectiveLevel() slog.Level {
	if v := slog.Level(-f.Verbosity); f.Verbosity > 0 && v < f.Level {
		return v
	}
	return f.Level
}

// Handler returns the slog handler the flags describe, writing to w.
func (f *Flags) Handler(w io.Writer) (slog.Handler, error) {
	if f.Verbosity < 0 {
		return nil, &FlagError{Flag: "v", Value: strconv.Itoa(f.Verbosity), Reason: "must not be negative"}
	}
	opts := &slog.HandlerOptions{Level: f.EffectiveLevel()}
	switch f.Format {
	case FormatText:
		return slog.NewTextHandler(w, opts), nil
	case FormatJSON:
		return slog.NewJSONHandler(w, opts), nil
	}
	return nil, &FlagError{Flag: "log-format", Value: f.Format, Reason: `must be "text" or "json"`}
}

// Logger returns the logger the flags describe, writing to w, with the
// "component" attribute set to name, and routes klog into it (see the
// package documentation).
func (f *Flags) Logger(w io.Writer, name string) (*slog.Logger, error) {
	h, err := f.Handler(w)
	if err != nil {
		return nil, err
	}
	log := slog.New(h).With("component", name)
	RouteKlog(log, f.Verbosity)
	return log, nil
}

// RouteKlog sends klog's output (client-go's logs) to log and sets klog's
// verbosity to v.
func RouteKlog(log *slog.Logger, v int) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	// These names and values are klog's own; setting them cannot fail.
	_ = fs.Set("v", strconv.Itoa(max(v, 0)))
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	klog.SetSlogLogger(log)
}
