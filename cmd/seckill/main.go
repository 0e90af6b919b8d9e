// Command seckill runs the flash-sale order service and its tools.
//
//	seckill serve     run the HTTP service
//	seckill migrate   apply database migrations
//	seckill token     mint a JWT for a user or an admin
//	seckill solve     solve a voucher's challenge for a buyer
//	seckill reconcile compare Redis with the database; --repair fixes Redis
//	seckill dlq       list, retry or discard dead-lettered orders
//	seckill stats     the open vouchers, their streams and the drift, as tables
//	seckill demo      a whole flash sale on the embedded default, explained
//	seckill bench     load a server with a flash sale and check its books
//	seckill sms-sink  receive the login webhook here and print each code
//	seckill latency-proxy  a TCP proxy that adds a delay to each round trip
//	seckill completion bash|zsh|fish  a shell completion script
//	seckill version   print the version
//
// seckill help CMD, seckill CMD --help and seckill CMD -h print a command's
// flags. Every flag has an environment variable: --db-url is
// SECKILL_DB_URL. A flag given on the command line wins over its variable.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/seckill/seckill/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// command is one subcommand: what help, completion and the dispatch know
// of it.
type command struct {
	name, summary string
	// args follow the flags on the usage line, as "list | retry ID".
	args string
	// about is a paragraph of help between the usage line and the flags.
	about    string
	examples []string
	// flags registers the command's flags, as its run does, for help and
	// completion; nil for a command without flags.
	flags func(fs *flagSet)
	// words are what completion offers besides the flags: the command's
	// positional arguments.
	words []string
	run   func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error
}

// commands is set in init: help and completion read it, and they are
// commands themselves.
var commands []command

func init() {
	commands = []command{
		{name: "serve", summary: "run the HTTP service", flags: func(fs *flagSet) { serveFlags(fs, new(Config)) }, run: runServe,
			about: "With no SECKILL_REDIS_URL and no SECKILL_DB_URL it runs on the embedded default (an in-process Redis,\n" +
				"SQLite in --data-dir) and prints an admin token; set both, and SECKILL_JWT_SECRET, for real services.",
			examples: []string{
				"seckill serve",
				"SECKILL_REDIS_URL=redis://127.0.0.1:6379/0 SECKILL_DB_URL=mysql://root@127.0.0.1:3306/test \\\n    SECKILL_JWT_SECRET=$(openssl rand -hex 32) seckill serve --addr :9000",
			}},
		{name: "migrate", summary: "apply the database migrations", flags: func(fs *flagSet) { migrateFlags(fs, new(Config)) }, run: runMigrate,
			examples: []string{"seckill migrate --db-url postgres://postgres@127.0.0.1:5432/test"}},
		{name: "token", summary: "mint a JWT for a user or an admin", flags: func(fs *flagSet) { tokenFlags(fs, new(Config), new(tokenArgs)) }, run: runToken,
			examples: []string{"export TOKEN=$(seckill token --user 1 --admin)", "seckill token --user 42 --token-ttl 1h"}},
		{name: "solve", summary: "get a voucher's challenge for a buyer, solve it, print the X-Altcha header", flags: func(fs *flagSet) { solveFlags(fs, new(solveArgs)) }, run: runSolve,
			examples: []string{`ALTCHA=$(seckill solve --voucher 3 --token "$BUYER")`}},
		{name: "reconcile", summary: "compare Redis with the database per voucher; --repair fixes Redis", flags: func(fs *flagSet) { reconcileFlags(fs, new(Config), new(bool), new(int64)) }, run: runReconcile,
			about:    "Exit status 3 when they disagree.",
			examples: []string{"seckill reconcile", "seckill reconcile --voucher 7 --repair"}},
		{name: "dlq", summary: "list, retry or discard dead-lettered orders", args: "list | retry ID | discard ID", about: dlqAbout, words: []string{"list", "retry", "discard"},
			flags: func(fs *flagSet) { dlqFlags(fs, new(Config), new(int64)) }, run: runDLQ,
			examples: []string{"seckill dlq list", "seckill dlq retry 7:1733580000000-0"}},
		{name: "stats", summary: "the open vouchers, their streams and the drift; --url for a server's admissions", flags: func(fs *flagSet) { statsFlags(fs, new(Config), new(string)) }, run: runStats,
			examples: []string{"seckill stats", "seckill stats --url :8080"}},
		{name: "demo", summary: "a whole flash sale on the embedded default, explained", flags: func(fs *flagSet) { demoFlags(fs, new(int), new(int64)) }, run: runDemo,
			examples: []string{"seckill demo", "seckill demo --users 5000 --stock 500"}},
		{name: "bench", summary: "load a server with a flash sale and check its books", flags: func(fs *flagSet) { benchFlagSet(fs, new(Config), new(benchFlags)) }, run: runBench,
			examples: []string{"seckill bench --compare sync,queue,stream", "seckill bench --url :8080 --users 10000 --stock 1000"}},
		{name: "sms-sink", summary: "receive the login webhook on this machine and print each code", flags: func(fs *flagSet) { smsSinkFlags(fs, new(Config)) }, run: runSMSSink,
			about: "Listens where --login-webhook-url points (the same variable serve posts to) and prints each\n" +
				"code as phone, code and expiry; with --login-webhook-secret it refuses unsigned or stale posts.",
			examples: []string{"export SECKILL_LOGIN_WEBHOOK_URL=http://127.0.0.1:8025/ SECKILL_LOGIN_WEBHOOK_SECRET=$(openssl rand -hex 32)\n  seckill sms-sink &\n  seckill serve"}},
		{name: "latency-proxy", summary: "a TCP proxy that adds a delay to each round trip (bench --db-latency starts one)", flags: func(fs *flagSet) { latencyProxyFlags(fs, new(bench.LatencyConfig)) }, run: runLatencyProxy,
			examples: []string{"seckill latency-proxy --target 127.0.0.1:3306 --delay 2ms"}},
		{name: "completion", summary: "print a shell completion script", args: "bash | zsh | fish", words: []string{"bash", "zsh", "fish"}, run: runCompletion,
			examples: []string{"source <(seckill completion bash)", "seckill completion zsh > \"${fpath[1]}/_seckill\"", "seckill completion fish > ~/.config/fish/completions/seckill.fish"}},
		{name: "help", summary: "print a command's help", args: "[COMMAND]", run: runHelp,
			examples: []string{"seckill help serve"}},
		{name: "version", summary: "print the version (also seckill --version)", run: runVersion},
	}
	for i := range commands {
		if commands[i].name == "help" {
			commands[i].words = commandNames()
		}
	}
}

func lookupCommand(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

func commandNames() []string {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	return names
}

// run runs the subcommand in args and returns the process's exit code:
// 0 on success, 2 for a usage error, 1 for any other failure.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "-version", "--version":
		args = []string{"version"}
	}
	c := lookupCommand(args[0])
	if c == nil {
		if len(args[0]) > 1 && args[0][0] == '-' {
			fmt.Fprintf(stderr, "seckill: unknown flag %s: flags follow the command\nrun 'seckill --help' for usage\n", args[0])
		} else {
			fmt.Fprintf(stderr, "seckill: unknown command %q\nrun 'seckill --help' for usage\n", args[0])
		}
		return 2
	}
	err := c.run(ctx, args[1:], getenv, stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		c.help(stdout)
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "run 'seckill %s --help' for usage\n", c.name)
		return 2
	case errors.Is(err, errDrift):
		return 3
	}
	fmt.Fprintf(stderr, "seckill %s: %v\n", c.name, err)
	return 1
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "seckill: a flash-sale order service")
	fmt.Fprintln(w, "\nUsage: seckill <command> [flags]\n\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Run 'seckill help <command>' (or seckill <command> --help) for its flags, and
'seckill --version' for the version. Every flag also reads an environment
variable: --db-url from SECKILL_DB_URL, and so on; a flag given wins.
`)
}

// runHelp prints the help of the command named in args, or the list.
func runHelp(_ context.Context, args []string, _ func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		return flag.ErrHelp
	}
	switch len(args) {
	case 0:
		usage(stdout)
		return nil
	case 1:
		c := lookupCommand(args[0])
		if c == nil {
			fmt.Fprintf(stderr, "seckill help: unknown command %q\n", args[0])
			return errUsage
		}
		c.help(stdout)
		return nil
	}
	fmt.Fprintf(stderr, "seckill help: want one command, got %q\n", args)
	return errUsage
}
