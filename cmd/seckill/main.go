// Command seckill runs the flash-sale order service and its tools.
//
//	seckill serve     run the HTTP service
//	seckill migrate   apply database migrations
//	seckill token     mint a JWT for a user or an admin
//	seckill reconcile compare Redis with the database; --repair fixes Redis
//	seckill dlq       list, retry or discard dead-lettered orders
//	seckill stats     the open vouchers, their streams and the drift, as tables
//	seckill demo      a whole flash sale on the embedded default, explained
//	seckill bench     load a server with a flash sale and check its books
//	seckill latency-proxy  a TCP proxy that adds a delay to each round trip
//	seckill version   print the version
//
// Every flag has an environment variable: --db-url is SECKILL_DB_URL. A flag
// given on the command line wins over its variable.
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
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// command is one subcommand.
type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error
}

var commands = []command{
	{"serve", "run the HTTP service", runServe},
	{"migrate", "apply the database migrations", runMigrate},
	{"token", "mint a JWT for a user or an admin", runToken},
	{"solve", "get a voucher's challenge for a buyer, solve it, print the X-Altcha header", runSolve},
	{"reconcile", "compare Redis with the database per voucher; --repair fixes Redis", runReconcile},
	{"dlq", "list, retry or discard dead-lettered orders", runDLQ},
	{"stats", "the open vouchers, their streams and the drift; --url for a server's admissions", runStats},
	{"demo", "a whole flash sale on the embedded default, explained", runDemo},
	{"bench", "load a server with a flash sale and check its books", runBench},
	{"latency-proxy", "a TCP proxy that adds a delay to each round trip (bench --db-latency starts one)", runLatencyProxy},
	{"version", "print the version", runVersion},
}

// run runs the subcommand in args and returns the process's exit code:
// 0 on success, 2 for a usage error, 1 for any other failure.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], getenv, stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			return 2
		case errors.Is(err, errDrift):
			return 3
		}
		fmt.Fprintf(stderr, "seckill %s: %v\n", c.name, err)
		return 1
	}
	fmt.Fprintf(stderr, "seckill: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "seckill: a flash-sale order service")
	fmt.Fprintln(w, "\nUsage: seckill <command> [flags]\n\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun seckill <command> -h for its flags. Every flag also reads an environment\nvariable: --db-url from SECKILL_DB_URL, and so on.")
}
