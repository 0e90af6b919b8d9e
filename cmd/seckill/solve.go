package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/seckill/seckill"
)

// runSolve gets a voucher's challenge for a buyer, solves it as the sale
// page does, and prints the X-Altcha header that carries the solution:
// the challenge from a shell, as the README's walk-through uses it.
func runSolve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var a solveArgs
	fs := newFlagSet("solve")
	solveFlags(fs, &a)
	if err := parseFlags(fs, args, getenv, stderr); err != nil {
		return err
	}
	if a.voucher <= 0 || a.token == "" {
		fmt.Fprintln(stderr, "seckill solve: --voucher and --token are required")
		return errUsage
	}
	if a.url == "" {
		a.url = defaultServer(getenv)
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	url := a.url + "/api/vouchers/" + strconv.FormatInt(a.voucher, 10) + "/challenge"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("get the challenge: %w", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	if err != nil {
		return fmt.Errorf("read the challenge: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, res.Status, strings.TrimSpace(string(body)))
	}
	var ch seckill.Challenge
	if err := json.Unmarshal(body, &ch); err != nil {
		return fmt.Errorf("the challenge: %w", err)
	}
	start := time.Now()
	sol, err := seckill.SolveChallenge(ctx, ch)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "solved in %v: number %d of at most %d\n", time.Since(start).Round(time.Millisecond), sol.Number, ch.MaxNumber)
	fmt.Fprintln(stdout, sol.Header())
	return nil
}

// solveArgs are solve's flags.
type solveArgs struct {
	url, token string
	voucher    int64
	timeout    time.Duration
}

func solveFlags(fs *flagSet, a *solveArgs) {
	fs.Int64Var(&a.voucher, "voucher", 0, "the voucher to buy (required)")
	fs.StringVar(&a.token, "token", "", "the buyer's token (seckill token --user N); the solution is bound to this buyer (required)")
	urlFlag(fs, &a.url, "the server: a `URL`, or an address as serve's --addr takes it (default: serve's, from $SECKILL_ADDR, else http://localhost:8080)")
	fs.DurationVar(&a.timeout, "timeout", 30*time.Second, "give up after this long")
}
