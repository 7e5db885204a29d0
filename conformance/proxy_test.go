package conformance

import (
	"bufio"
	"net"
	"testing"
	"time"
)

func TestProxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { // a line echo server
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	p := NewProxy(t, ln.Addr().String())
	echo := func() error {
		c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return err
		}
		_, err = bufio.NewReader(c).ReadString('\n')
		return err
	}
	if err := echo(); err != nil {
		t.Fatalf("up: %v", err)
	}
	p.Set(ProxyDown)
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Error("down: a connection was accepted")
	}
	p.Set(ProxyUp)
	if err := echo(); err != nil {
		t.Fatalf("up again: %v", err)
	}
	p.Set(ProxyBlackhole)
	if err := echo(); err == nil {
		t.Error("blackhole: an answer came back")
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Errorf("blackhole: %v, want a timeout", err)
	}
	p.Set(ProxyUp)
	if err := echo(); err != nil {
		t.Fatalf("up after blackhole: %v", err)
	}
}
