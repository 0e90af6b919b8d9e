package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/seckill/seckill"
)

func runReconcile(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var (
		c       Config
		repair  bool
		voucher int64
	)
	fs := newFlagSet("reconcile")
	reconcileFlags(fs, &c, &repair, &voucher)
	if err := parseFlags(fs, args, getenv, stderr); err != nil {
		return err
	}
	t, err := openTool(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer t.close()
	vouchers := t.Vouchers
	ids := []int64{voucher}
	if voucher == 0 {
		if ids, err = vouchers.OpenVoucherIDs(ctx); err != nil {
			return err
		}
	}
	r := t.Reconciler
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "voucher\tinitial\tdb stock\tdb orders\tredis remaining\tredis buyers\tpending\tdead letters\tdrift\tbuyer drift\t")
	var bad, unloaded int
	for _, id := range ids {
		rec, err := r.Reconcile(ctx, id, repair)
		if err != nil {
			return err
		}
		remaining := fmt.Sprint(rec.Remaining)
		if !rec.Loaded {
			remaining = "not loaded"
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t\n", id, rec.Voucher.InitialStock, rec.Voucher.Stock,
			rec.Orders, remaining, rec.Buyers, rec.Pending, rec.DeadLetters, rec.Drift, rec.BuyerDrift)
		if rec.Estimated {
			fmt.Fprintf(tw, "\t(an estimate: the backlog is beyond the read's bounds; not repaired)\t\t\t\t\t\t\t\t\t\n")
		}
		if sh := rec.Shards; sh != nil {
			fmt.Fprintf(tw, "\t(%d shards: stock and buyers %d, in flight %d, shard drift %d%s)\t\t\t\t\t\t\t\t\t\n",
				len(sh.Shards), sh.Total-sh.InFlight, sh.InFlight, rec.ShardDrift, notLoaded(sh))
		}
		if rec.Repaired {
			fmt.Fprintf(tw, "\t(repaired: rebuilt in Redis from the database)\t\t\t\t\t\t\t\t\t\n")
		}
		if !rec.OK() {
			bad++
			if !rec.Loaded && !rec.Repaired {
				unloaded++
			}
		}
	}
	tw.Flush()
	switch {
	case len(ids) == 0:
		fmt.Fprintf(stdout, "no vouchers on sale or ended within %v\n", c.Retention)
	case bad == 0:
		fmt.Fprintln(stdout, "Redis and the database agree: remaining + orders + pending = initial stock for every voucher"+
			" (and, for a sharded one, its shards' stock and buyers + stock in flight between them = initial stock)")
	case unloaded == bad && !repair:
		// Nothing of these vouchers in Redis at all: more likely the wrong
		// Redis, or the wrong prefix, than lost data; a repair would write
		// them where the service does not look.
		fmt.Fprintf(stdout, "%d voucher(s) disagree, none of them loaded in Redis: is this the service's Redis (--redis-url %s) and key prefix (--redis-prefix %q)? "+
			"If it is, and Redis lost them, run again with --repair to rebuild them there from the database\n", bad, redisShown(c.RedisURL), c.RedisPrefix)
		return errDrift
	default:
		fmt.Fprintf(stdout, "%d voucher(s) disagree; run again with --repair to rebuild them in Redis from the database\n", bad)
		return errDrift
	}
	return nil
}

// notLoaded names a sharded voucher's shards that are not loaded.
func notLoaded(sh *seckill.ShardCounts) string {
	var lost []string
	for _, s := range sh.Shards {
		if !s.Loaded {
			lost = append(lost, strconv.Itoa(s.Index))
		}
	}
	if len(lost) == 0 {
		return ""
	}
	return "; not loaded: shard " + strings.Join(lost, ", ")
}

// redisShown is the Redis URL for a message: without its password, or
// "the embedded server" when there is none.
func redisShown(raw string) string {
	if raw == "" {
		return "(the embedded server)"
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}

func reconcileFlags(fs *flagSet, c *Config, repair *bool, voucher *int64) {
	fs.BoolVar(repair, "repair", false, "rebuild in Redis, from the database and the queued orders, each voucher that disagrees")
	fs.Int64Var(voucher, "voucher", 0, "reconcile this voucher only (default: every voucher on sale or ended within --retention)")
	fs.group("The service's sale", func(fs *flag.FlagSet) {
		c.saleFlags(fs, "how the service takes orders: stream, queue or sync (the queue mode's repair keeps the buyers Redis holds: their orders may wait in an instance's memory)")
	})
	fs.group("Redis", c.redisFlags)
	fs.group("Database", c.dbFlags)
	fs.group("Logging", c.logFlags)
}
