package vgpusim

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
)

// gate is a TCP relay in front of vcsim's server. It owns the address clients use, so
// that closing it makes clients see a refused connection (not a TLS or HTTP error)
// while vcsim, its sessions and its state stay up.
type gate struct {
	addr   string
	target string
	log    *slog.Logger

	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func openGate(addr, target string, log *slog.Logger) (*gate, error) {
	g := &gate{target: target, log: log, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	g.addr = ln.Addr().String()
	g.serve(ln)
	return g, nil
}

func (g *gate) serve(ln net.Listener) {
	g.ln = ln
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				g.relay(c)
			}()
		}
	}()
}

func (g *gate) relay(client net.Conn) {
	server, err := net.Dial("tcp", g.target)
	if err != nil {
		_ = client.Close()
		return
	}
	if !g.track(client, server) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Close both sides: either end hanging up ends the exchange.
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	<-done
	g.untrack(client, server)
}

func (g *gate) track(conns ...net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln == nil {
		return false
	}
	for _, c := range conns {
		g.conns[c] = struct{}{}
	}
	return true
}

func (g *gate) untrack(conns ...net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range conns {
		delete(g.conns, c)
	}
}

// refuse stops listening and drops every open connection.
func (g *gate) refuse() {
	g.mu.Lock()
	ln := g.ln
	g.ln = nil
	for c := range g.conns {
		_ = c.Close()
	}
	g.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
		g.log.Info("Refusing connections", "addr", g.addr)
	}
}

// accept listens again on the same address.
func (g *gate) accept() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return errors.New("vgpusim: simulator is closed")
	}
	if g.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", g.addr)
	if err != nil {
		return fmt.Errorf("vgpusim: listen again on %s: %w", g.addr, err)
	}
	g.serve(ln)
	g.log.Info("Accepting connections", "addr", g.addr)
	return nil
}

func (g *gate) close() {
	g.refuse()
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wg.Wait()
}
