package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
)

// Exit codes of every dynmig binary, the convention migctl documents.
const (
	ExitOK      = 0  // success, and -h
	ExitFailure = 1  // the component failed
	ExitUsage   = 64 // a flag or its value is wrong
)

// Parse parses args into fs, reporting a bad flag once on w. It returns
// the code to exit with and true when the binary must stop: ExitOK after
// -h printed the usage, ExitUsage after a bad flag. fs's own error
// handling is replaced by flag.ContinueOnError, so that the flag package
// never exits on the binary's behalf.
func Parse(fs *flag.FlagSet, args []string, w io.Writer) (code int, stop bool) {
	fs.Init(fs.Name(), flag.ContinueOnError)
	fs.SetOutput(w)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return ExitOK, true
	case err != nil:
		return ExitUsage, true // the flag package printed the error and the usage
	case fs.NArg() > 0:
		fmt.Fprintf(w, "unexpected arguments %q\n", fs.Args())
		return ExitUsage, true
	}
	return ExitOK, false
}

// Start parses a binary's arguments into fs ([Parse]), prints the version
// for -version, runs check, and returns the logger the common flags
// configure. check (nil: none) validates the binary's own flags once they
// are parsed, before any logger, cluster connection or hardware exists; the
// usage errors it returns (each naming its flag, [FlagError]) are reported
// with [ReportUsage]. When stop is true the binary exits with code: after
// -h or -version (0), or a usage error (64), reported on stderr.
func (f *Flags) Start(fs *flag.FlagSet, name string, args []string, stdout, stderr io.Writer, check func() error) (log *slog.Logger, code int, stop bool) {
	if code, stop := Parse(fs, args, stderr); stop {
		return nil, code, true
	}
	if f.ShowVersion {
		if err := PrintVersion(stdout, name); err != nil {
			return nil, ExitFailure, true
		}
		return nil, ExitOK, true
	}
	h, err := f.Handler(stderr)
	if check != nil {
		err = errors.Join(err, check())
	}
	if err != nil {
		return nil, ReportUsage(stderr, name, err), true
	}
	log = slog.New(h).With("component", name)
	RouteKlog(log, f.Verbosity)
	return log, ExitOK, false
}
