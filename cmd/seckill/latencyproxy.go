package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/seckill/seckill/bench"
)

func latencyProxyFlags(fs *flagSet, cfg *bench.LatencyConfig) {
	fs.StringVar(&cfg.Target, "target", "", "the service's host:port")
	fs.DurationVar(&cfg.Delay, "delay", time.Millisecond, "added to each round trip")
	fs.DurationVar(&cfg.Spin, "spin", 0, "the last stretch of each delay spent spinning instead of on a timer (costs CPU)")
}

// runLatencyProxy runs a delaying TCP proxy (bench.LatencyProxy) in a
// process of its own: seckill bench --db-latency starts one in front of
// the database, so that the proxy's goroutines do not queue behind the
// loaded bench's (measured: an in-process proxy added 5 ms, not 1, to a
// round trip under a stream sale's load). It prints its address on a
// line, then reads commands from its standard input, one a line: "down"
// cuts every connection and refuses new ones, "up" lets them back; each
// is answered "ok". It ends when its input does: its parent is gone.
func runLatencyProxy(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("latency-proxy")
	var cfg bench.LatencyConfig
	latencyProxyFlags(fs, &cfg)
	if err := parseFlags(fs, args, getenv, stderr); err != nil {
		return err
	}
	p, err := bench.StartLatencyProxy(cfg)
	if err != nil {
		return err
	}
	defer p.Close()
	fmt.Fprintln(stdout, p.Addr())
	done := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			switch sc.Text() {
			case "down":
				p.Down()
			case "up":
				p.Up()
			default:
				fmt.Fprintf(stdout, "unknown command %q\n", sc.Text())
				continue
			}
			fmt.Fprintln(stdout, "ok")
		}
		done <- sc.Err()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return nil
	}
}

// proxyProcess is a latency-proxy child of this process.
type proxyProcess struct {
	cmd  *exec.Cmd
	addr string

	mu  sync.Mutex // one command at a time
	in  io.WriteCloser
	out *bufio.Scanner
}

// startProxyProcess starts this program's latency-proxy in front of target.
func startProxyProcess(cfg bench.LatencyConfig) (_ *proxyProcess, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("latency proxy: find this program: %w", err)
	}
	cmd := exec.Command(exe, "latency-proxy", "--target", cfg.Target, "--delay", cfg.Delay.String(), "--spin", cfg.Spin.String())
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("latency proxy: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("latency proxy: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("latency proxy: start %s: %w", exe, err)
	}
	p := &proxyProcess{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	if !p.out.Scan() {
		p.Close()
		return nil, fmt.Errorf("latency proxy: no address from %s latency-proxy: %v", exe, p.out.Err())
	}
	p.addr = strings.TrimSpace(p.out.Text())
	return p, nil
}

// Addr returns the proxy's host:port.
func (p *proxyProcess) Addr() string { return p.addr }

// Down cuts every connection and refuses new ones, once the child says so.
func (p *proxyProcess) Down() { p.command("down") }

// Up lets connections back.
func (p *proxyProcess) Up() { p.command("up") }

func (p *proxyProcess) command(c string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := fmt.Fprintln(p.in, c); err != nil {
		fmt.Fprintf(os.Stderr, "latency proxy: %s: %v\n", c, err)
		return
	}
	if !p.out.Scan() || p.out.Text() != "ok" {
		fmt.Fprintf(os.Stderr, "latency proxy: %s: answered %q (%v)\n", c, p.out.Text(), p.out.Err())
	}
}

// Close ends the child, by closing its input, and waits for it.
func (p *proxyProcess) Close() error {
	p.in.Close()
	err := p.cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return fmt.Errorf("latency proxy: %w", err)
	}
	return err
}
