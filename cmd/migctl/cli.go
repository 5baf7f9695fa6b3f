package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/dynmig/dynmig/internal/wiring/cli"
)

// Exit codes, documented in the package comment and in `migctl help`.
const (
	exitOK            = 0
	exitInvalid       = 1
	exitUnschedulable = 2
	exitUsage         = 64
)

// env is what a command runs with; tests pass buffers.
type env struct {
	ctx    context.Context
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// command is one subcommand.
type command struct {
	name    string
	args    string // synopsis of flags and arguments
	summary string // one line
	help    string // what it does, printed by --help
	// setup declares the command's flags and returns the function that
	// runs it with the positional arguments.
	setup func(fs *flag.FlagSet) func(e *env, args []string) error
}

func commands() []command {
	return []command{
		discoverCommand(), validateCommand(), placeCommand(), statusCommand(),
		metricsCommand(), defaultsCommand(), convertLegacyCommand(), simulateCommand(),
		versionCommand(),
	}
}

func versionCommand() command {
	return command{
		name:    "version",
		summary: "print migctl's version and VCS revision",
		help: `Prints the module version and VCS revision migctl was built from (as
-version does on every dynmig binary).`,
		setup: func(*flag.FlagSet) func(*env, []string) error {
			return func(e *env, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				return cli.PrintVersion(e.stdout, "migctl")
			}
		},
	}
}

// exitError carries the exit code of a failed command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageErr is a usage error (exit 64).
func usageErr(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// findings reports that the command printed its findings and fails with
// exit 1 without another message.
var errFindings = &exitError{code: exitInvalid, err: errors.New("")}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		writeUsage(stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c, ok := lookup(args[1]); ok {
				fs := c.flags()
				c.setup(fs) // declares the flags; the command does not run
				c.writeHelp(stdout, fs)
				return exitOK
			}
			fmt.Fprintf(stderr, "migctl: unknown command %q\n", args[1])
			return exitUsage
		}
		writeUsage(stdout)
		return exitOK
	case "-version", "--version":
		if err := cli.PrintVersion(stdout, "migctl"); err != nil {
			return exitInvalid
		}
		return exitOK
	}
	c, ok := lookup(name)
	if !ok {
		fmt.Fprintf(stderr, "migctl: unknown command %q\n\n", name)
		writeUsage(stderr)
		return exitUsage
	}
	return c.run(e, args[1:])
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func (c command) flags() *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and help are printed by run
	return fs
}

func (c command) run(e *env, args []string) int {
	fs := c.flags()
	exec := c.setup(fs)
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		c.writeHelp(e.stdout, fs)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "migctl %s: %v\n", c.name, err)
		fmt.Fprintf(e.stderr, "usage: %s (see migctl %s --help)\n", c.synopsis(), c.name)
		return exitUsage
	}
	err = exec(e, pos)
	if err == nil {
		return exitOK
	}
	code := exitInvalid
	var xe *exitError
	if errors.As(err, &xe) {
		code = xe.code
	}
	if msg := err.Error(); msg != "" {
		fmt.Fprintf(e.stderr, "migctl %s: %s\n", c.name, msg)
	}
	if code == exitUsage {
		fmt.Fprintf(e.stderr, "usage: %s (see migctl %s --help)\n", c.synopsis(), c.name)
	}
	return code
}

// parseInterleaved parses flags anywhere among the arguments, as people
// type them ("validate FILE --node N"); "--" ends flag parsing.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// synopsis is the command's usage line: its name, flags and arguments.
func (c command) synopsis() string { return strings.TrimSpace("migctl " + c.name + " " + c.args) }

func (c command) writeHelp(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: %s\n\n%s\n", c.synopsis(), strings.TrimSpace(c.help))
	var flags strings.Builder
	fs.SetOutput(&flags)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	if flags.Len() > 0 {
		fmt.Fprintf(w, "\nflags:\n%s", flags.String())
	}
	fmt.Fprint(w, "\n"+exitCodesHelp)
}

const exitCodesHelp = `exit codes: 0 success; 1 invalid input or findings; 2 unschedulable (place);
64 usage error.
`

func writeUsage(w io.Writer) {
	fmt.Fprint(w, `migctl: operator's tool for dynamic NVIDIA MIG. It reads files or standard
input ("-") and accepts Kubernetes JSON as kubectl get ... -o json prints it
(Pod, PodList, Node, NodeList, List; YAML too).

usage: migctl <command> [flags] [args]

commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-15s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun migctl <command> --help for a command's flags.\n\n"+exitCodesHelp)
}

// maxInput bounds what migctl reads from one file or standard input.
const maxInput = 64 << 20

// readInput reads a file, or standard input for "-".
func (e *env) readInput(name string) ([]byte, error) {
	var r io.Reader
	if name == "-" {
		r = e.stdin
		if r == nil {
			r = strings.NewReader("")
		}
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxInput+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", displayName(name), err)
	}
	if len(data) > maxInput {
		return nil, fmt.Errorf("%s: larger than %d MiB", displayName(name), maxInput>>20)
	}
	return data, nil
}

func displayName(name string) string {
	if name == "-" {
		return "standard input"
	}
	return name
}

// oneFile returns the single positional argument, or "-" when there is
// none and standard input may be used.
func oneFile(args []string) (string, error) {
	switch len(args) {
	case 0:
		return "-", nil
	case 1:
		return args[0], nil
	default:
		return "", usageErr("want one file, got %d arguments", len(args))
	}
}

// noArgs refuses positional arguments.
func noArgs(args []string) error {
	if len(args) > 0 {
		return usageErr("unexpected argument %q", args[0])
	}
	return nil
}
