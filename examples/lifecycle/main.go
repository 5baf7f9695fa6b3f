package main

import (
	"context"
	"flag"
	"fmt"
	"os"
)

func main() {
	cfg := defaultConfig()
	flag.StringVar(&cfg.Model, "model", cfg.Model, "fake GPU model (a fakehal preset name or alias)")
	flag.IntVar(&cfg.GPUs, "gpus", cfg.GPUs, "number of GPUs on the fake node")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "lifecycle: unexpected arguments %q\n", flag.Args())
		flag.Usage()
		os.Exit(2)
	}
	if err := run(context.Background(), os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "lifecycle:", err)
		os.Exit(1)
	}
}
