package faults

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNetnsCutAndHeal checks what the partition tests rest on: from inside
// the namespace a listener on the host's services address answers before
// Cut, not during it, and again after Heal; the test reaches a listener
// inside over the clients link all along; the proxy carries a loopback
// service inside; commands run inside; and nothing is left when the test
// ends.
func TestNetnsCutAndHeal(t *testing.T) {
	t.Parallel()
	var n *Netns
	t.Run("partition", func(t *testing.T) {
		n = NewNetns(t)
		out, err := n.Command("ip", "-o", "-4", "addr", "show").CombinedOutput()
		if err != nil {
			t.Fatalf("ip addr inside: %v\n%s", err, out)
		}
		for _, want := range []string{"127.0.0.1/8", n.NsServices + "/30", n.NsClients + "/30"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("inside, ip addr shows no %s:\n%s", want, out)
			}
		}
		if strings.Contains(string(out), n.HostServices+"/") {
			t.Errorf("inside, ip addr shows the host's %s:\n%s", n.HostServices, out)
		}

		services := echoServer(t, net.JoinHostPort(n.HostServices, "0"))
		inner, err := n.Listen("tcp", net.JoinHostPort(n.NsClients, "0"))
		if err != nil {
			t.Fatalf("listen inside: %v", err)
		}
		t.Cleanup(func() { inner.Close() })
		go serveEcho(inner)
		loopback := echoServer(t, "127.0.0.1:0")
		proxy := n.StartProxy(t, loopback)
		if host, _, _ := net.SplitHostPort(proxy.Addr()); host != n.HostServices {
			t.Errorf("the proxy listens on %s, want %s", proxy.Addr(), n.HostServices)
		}

		fromInside := func(addr string) error { return echo(n.Dial, addr) }
		fromHost := func(addr string) error {
			var d net.Dialer
			return echo(d.DialContext, addr)
		}
		if err := fromInside(services); err != nil {
			t.Fatalf("before the cut, the host's services address from inside: %v", err)
		}
		if err := fromInside(proxy.Addr()); err != nil {
			t.Fatalf("before the cut, the proxy from inside: %v", err)
		}
		if err := fromInside(loopback); err == nil {
			t.Fatalf("the host's loopback %s answered from inside", loopback)
		}

		n.Cut(t)
		if err := fromInside(services); err == nil {
			t.Fatal("cut off, the host's services address answered from inside")
		}
		if err := fromInside(proxy.Addr()); err == nil {
			t.Fatal("cut off, the proxy answered from inside")
		}
		if err := fromHost(inner.Addr().String()); err != nil {
			t.Fatalf("cut off, the listener inside from the host, over the clients link: %v", err)
		}
		if err := fromHost(services); err != nil {
			t.Fatalf("cut off, the host's services address from the host: %v", err)
		}

		n.Heal(t)
		if err := fromInside(services); err != nil {
			t.Fatalf("healed, the host's services address from inside: %v", err)
		}
		if err := fromInside(proxy.Addr()); err != nil {
			t.Fatalf("healed, the proxy from inside: %v", err)
		}
	})
	if n == nil {
		return
	}
	if _, err := os.Stat(filepath.Join("/run/netns", n.Name)); err == nil {
		t.Errorf("namespace %s is still there after its test", n.Name)
	}
	for _, link := range []string{n.HostServicesLink, n.HostClientsLink} {
		if _, err := os.Stat(filepath.Join("/sys/class/net", link)); err == nil {
			t.Errorf("link %s is still there after its test", link)
		}
	}
}

// echoServer listens on addr and echoes one line per connection until the
// test ends; it returns the address.
func echoServer(t *testing.T, addr string) string {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	t.Cleanup(func() { l.Close() })
	go serveEcho(l)
	return l.Addr().String()
}

func serveEcho(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err == nil {
				io.WriteString(c, line)
			}
		}()
	}
}

// echo connects with dial, within a second, and checks that a line comes
// back.
func echo(dial func(context.Context, string, string) (net.Conn, error), addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return io.ErrUnexpectedEOF
	}
	return nil
}
