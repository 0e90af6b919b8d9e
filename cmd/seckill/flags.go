package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
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

// flagSet is a command's flags: the standard library's, with the headings
// help shows them under and the old names they are still given by.
type flagSet struct {
	*flag.FlagSet
	groups  []flagGroup
	aliases map[string]string // deprecated name → its flag's name
}

// flagGroup is a heading of help and the flags under it.
type flagGroup struct {
	title string
	names []string
}

func newFlagSet(name string) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), aliases: map[string]string{}}
	// Errors and help are written by parseFlags and the command table, in
	// the --flag spelling; flag's own single-dash dump would bury them.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// group registers, with add, flags that help shows under title.
func (fs *flagSet) group(title string, add func(*flag.FlagSet)) {
	before := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { before[f.Name] = true })
	add(fs.FlagSet)
	g := flagGroup{title: title}
	fs.VisitAll(func(f *flag.Flag) {
		if !before[f.Name] {
			g.names = append(g.names, f.Name)
		}
	})
	fs.groups = append(fs.groups, g)
}

// alias makes old, and its variable, a deprecated name of the flag name:
// both still work, with a warning on stderr.
func (fs *flagSet) alias(old, name string) {
	f := fs.Lookup(name)
	fs.Var(f.Value, old, "deprecated: use --"+name)
	fs.aliases[old] = name
}

// visible calls fn for each flag but the deprecated names, in order.
func (fs *flagSet) visible(fn func(*flag.Flag)) {
	fs.VisitAll(func(f *flag.Flag) {
		if _, old := fs.aliases[f.Name]; !old {
			fn(f)
		}
	})
}

// sections are the flags under their headings: the command's own, not
// grouped, under "Flags", then the groups.
func (fs *flagSet) sections() []flagGroup {
	grouped := map[string]bool{}
	for _, g := range fs.groups {
		for _, n := range g.names {
			grouped[n] = true
		}
	}
	own := flagGroup{title: "Flags"}
	fs.visible(func(f *flag.Flag) {
		if !grouped[f.Name] {
			own.names = append(own.names, f.Name)
		}
	})
	if len(own.names) == 0 {
		return fs.groups
	}
	return append([]flagGroup{own}, fs.groups...)
}

// singleDash finds flag names in the flag package's messages, which spell
// them with one dash.
var singleDash = regexp.MustCompile(`(^|: |flag |for )-([a-zA-Z])`)

// parseFlags parses args into fs, then fills every flag not given on the
// command line from its environment variable. A mistake is reported on
// stderr in one line and returned as errUsage; -h and --help return
// flag.ErrHelp, for the caller to print the command's help.
func parseFlags(fs *flagSet, args []string, getenv func(string) string, stderr io.Writer) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		msg := strings.Replace(err.Error(), "flag provided but not defined:", "unknown flag", 1)
		fmt.Fprintf(stderr, "seckill %s: %s\n", fs.Name(), singleDash.ReplaceAllString(msg, "$1--$2"))
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "seckill %s: unexpected arguments: %s\n", fs.Name(), strings.Join(fs.Args(), " "))
		return errUsage
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	olds := make([]string, 0, len(fs.aliases))
	for old := range fs.aliases {
		olds = append(olds, old)
	}
	slices.Sort(olds)
	for _, old := range olds {
		if given[old] {
			fmt.Fprintf(stderr, "seckill %s: --%s is deprecated: use --%s\n", fs.Name(), old, fs.aliases[old])
			given[fs.aliases[old]] = true
		}
	}
	var errs []error
	fs.visible(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		name := envName(f.Name)
		v := getenv(name)
		if v == "" {
			for _, old := range olds {
				if fs.aliases[old] != f.Name {
					continue
				}
				if v = getenv(envName(old)); v != "" {
					fmt.Fprintf(stderr, "seckill %s: %s is deprecated: use %s\n", fs.Name(), envName(old), name)
					name = envName(old)
					break
				}
			}
		}
		if v != "" {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
			}
		}
	})
	return errors.Join(errs...)
}

// serverURL is the base URL of the server at s: a URL is taken as is, an
// address as --addr takes it (":8080", "host:8080") is reached over HTTP,
// an unspecified host on this machine.
func serverURL(s string) string {
	if strings.Contains(s, "://") {
		return strings.TrimSuffix(s, "/")
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "http://" + s
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// defaultServer is the server a command talks to without --url: the one
// serve listens on, by the same variable.
func defaultServer(getenv func(string) string) string {
	if a := getenv("SECKILL_ADDR"); a != "" {
		return serverURL(a)
	}
	return serverURL(defaultAddr)
}

// urlsValue is a --url flag: servers, comma-separated, each a URL or an
// address as --addr takes it.
type urlsValue struct{ p *string }

func (v urlsValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

func (v urlsValue) Set(s string) error {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, serverURL(u))
		}
	}
	*v.p = strings.Join(out, ",")
	return nil
}

// urlFlag registers --url: servers, comma-separated, each a URL or an
// address as serve's --addr takes it.
func urlFlag(fs *flagSet, p *string, usage string) {
	fs.Var(urlsValue{p}, "url", usage)
}
