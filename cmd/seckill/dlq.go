package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/seckill/seckill"
)

const dlqAbout = `  list         print the dead letters of the vouchers on sale or ended within --retention, oldest first
  retry ID     admit the dead letter's order again, with its own id; the workers then write it
  discard ID   remove the dead letter; its order stays failed

ID is a dead letter's id as list prints it: its order id, or <voucher id>:<entry id>.`

func runDLQ(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var (
		c       Config
		adminID int64
	)
	fs := newDLQFlags(&c, &adminID)
	positional, flags := splitArgs(fs, args)
	if err := parseFlags(fs, flags, getenv, stderr); err != nil {
		return err
	}
	var action, id string
	switch {
	case len(positional) == 1 && positional[0] == "list":
		action = "list"
	case len(positional) == 2 && (positional[0] == "retry" || positional[0] == "discard"):
		action, id = positional[0], positional[1]
	default:
		fmt.Fprintf(stderr, "seckill dlq: want list, retry ID or discard ID; got %q\n", strings.Join(positional, " "))
		return errUsage
	}
	if _, err := seckill.ParseMode(c.Mode); err != nil {
		return fmt.Errorf("--mode: %w", err)
	}
	t, err := openTool(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer t.close()
	dl := t.DeadLetters
	switch action {
	case "list":
		entries, err := dl.DeadLetters(ctx)
		if err != nil {
			return err
		}
		printDeadLetters(stdout, entries)
	case "retry":
		o, err := dl.RetryDeadLetter(ctx, id, adminID)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "dead letter %s: order %d admitted again, %s; the workers will write it to the database\n", id, o.ID, o.Status)
	case "discard":
		if err := dl.DiscardDeadLetter(ctx, id, adminID); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "dead letter %s discarded; its order, if it had one, stays failed\n", id)
	}
	return nil
}

// newDLQFlags returns the flags of dlq.
func newDLQFlags(c *Config, adminID *int64) *flagSet {
	fs := newFlagSet("dlq")
	dlqFlags(fs, c, adminID)
	return fs
}

func dlqFlags(fs *flagSet, c *Config, adminID *int64) {
	fs.Int64Var(adminID, "admin-id", 0, "the admin the log names as acting (0: the command line)")
	fs.group("The service's sale", func(fs *flag.FlagSet) {
		c.saleFlags(fs, "how the service takes orders; retry needs stream, whose workers read the order streams")
	})
	fs.group("Redis", c.redisFlags)
	fs.group("Database", c.dbFlags)
	fs.group("Logging", c.logFlags)
}

// printDeadLetters prints the dead letters as a table.
func printDeadLetters(w io.Writer, entries []seckill.DeadLetterEntry) {
	if len(entries) == 0 {
		fmt.Fprintln(w, "no dead letters in the vouchers on sale or ended within the retention (--retention)")
		return
	}
	orNone := func(n int64) string {
		if n == 0 {
			return "-"
		}
		return fmt.Sprint(n)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "id\tvoucher\torder\tuser\tdead-lettered at\tstock returned\treason")
	for _, e := range entries {
		returned := "no"
		if e.StockReturned {
			returned = "yes"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.VoucherID, orNone(e.OrderID), orNone(e.UserID),
			e.At.UTC().Format(time.RFC3339), returned, e.Reason)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d dead letter(s); seckill dlq retry ID admits one's order again, seckill dlq discard ID removes it\n", len(entries))
}

// splitArgs separates the positional arguments from the flags of fs,
// wherever they stand, so that `dlq retry ID --db-url …` works as well as
// `dlq --db-url … retry ID` (the flag package stops at the first
// positional argument).
func splitArgs(fs *flagSet, args []string) (positional, flags []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(positional, args[i+1:]...), flags
		case a == "-" || !strings.HasPrefix(a, "-"):
			positional = append(positional, a)
			continue
		}
		flags = append(flags, a)
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		if hasValue || f == nil || isBoolFlag(f) || i+1 == len(args) {
			continue
		}
		i++
		flags = append(flags, args[i])
	}
	return positional, flags
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
