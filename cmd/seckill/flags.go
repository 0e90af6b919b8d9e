package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// errUsage is a command-line mistake, already explained on stderr.
var errUsage = errors.New("usage")

// errDrift is reconcile's finding that Redis and the database disagree,
// already reported on stdout: exit status 3.
var errDrift = errors.New("drift")

// envName is the environment variable of a flag: db-url → SECKILL_DB_URL.
func envName(flagName string) string {
	return "SECKILL_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseFlags parses args into fs, then fills every flag not given on the
// command line from its environment variable. Each flag's help names its
// variable.
func parseFlags(fs *flag.FlagSet, args []string, getenv func(string) string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	fs.VisitAll(func(f *flag.Flag) {
		f.Usage += fmt.Sprintf(" [$%s]", envName(f.Name))
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected arguments: %s\n", strings.Join(fs.Args(), " "))
		fs.Usage()
		return errUsage
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		name := envName(f.Name)
		if v := getenv(name); v != "" {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
			}
		}
	})
	return errors.Join(errs...)
}
