package main

import (
	"bufio"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestLatencyProxyCommand: seckill latency-proxy, as bench --db-latency
// runs it, prints its address, delays each round trip by at least its
// --delay, cuts and refuses connections on "down" and lets them back on
// "up" (each answered "ok"), and exits when its input closes.
func TestLatencyProxyCommand(t *testing.T) {
	t.Parallel()
	bin := seckillBinary(t)
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()

	const delay = 20 * time.Millisecond
	cmd := exec.Command(bin, "latency-proxy", "--target", echo.Addr().String(), "--delay", delay.String())
	in, _ := cmd.StdinPipe()
	outPipe, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer cmd.Process.Kill()
	out := bufio.NewScanner(outPipe)
	if !out.Scan() {
		t.Fatalf("no address printed: %v", out.Err())
	}
	addr := strings.TrimSpace(out.Text())
	command := func(c string) {
		t.Helper()
		io.WriteString(in, c+"\n")
		if !out.Scan() || out.Text() != "ok" {
			t.Fatalf("%s: answered %q (%v), want ok", c, out.Text(), out.Err())
		}
	}
	// roundTrip sends a byte through the proxy and times its echo; an
	// error when the proxy cuts or refuses the connection.
	roundTrip := func(c net.Conn) (time.Duration, error) {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		if _, err := c.Write([]byte{'x'}); err != nil {
			return 0, err
		}
		_, err := c.Read(make([]byte, 1))
		return time.Since(start), err
	}

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if d, err := roundTrip(c); err != nil || d < delay {
		t.Fatalf("a round trip through the proxy took %v (%v), want at least %v", d, err, delay)
	}
	command("down")
	if _, err := roundTrip(c); err == nil {
		t.Error("an open connection still answers after down")
	}
	if c2, err := net.Dial("tcp", addr); err == nil {
		if _, err := roundTrip(c2); err == nil {
			t.Error("a new connection answers while down")
		}
		c2.Close()
	}
	command("up")
	c3, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if _, err := roundTrip(c3); err != nil {
		t.Errorf("a new connection after up: %v", err)
	}
	in.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("latency-proxy exited with %v after its input closed, want 0", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("latency-proxy still runs 10s after its input closed")
	}
}
