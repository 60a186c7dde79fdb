// Command hostpathplugin (dra-testbed's own): the proxy mode that Kubernetes' DRA e2e tests drive.
//
// The e2e suite runs its kubelet plugin inside e2e.test and reaches each node through a pod. It execs
//
//	/hostpathplugin --v=5 --endpoint=<unix socket> --proxy-endpoint=tcp://:<port>
//
// in that pod and then port-forwards to <port>: every forwarded connection is one the plugin's gRPC
// server accepts. This program listens on both ends and pairs each connection the kubelet opens on the
// Unix socket with one idle connection from e2e.test, copying bytes both ways until either side closes.
// The e2e side keeps up to ten idle connections open; its server may write (HTTP/2 settings) before
// a kubelet connection arrives, so those bytes are held until the pairing.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// upstream is one idle connection from e2e.test, read from as soon as it is accepted.
type upstream struct {
	conn   net.Conn
	chunks chan []byte   // what e2e.test sent, in order; closed at EOF
	dead   chan struct{} // closed when the connection ended before or after pairing
}

func accept(conn net.Conn) *upstream {
	u := &upstream{conn: conn, chunks: make(chan []byte, 64), dead: make(chan struct{})}
	go func() {
		defer close(u.chunks)
		defer close(u.dead)
		for {
			buf := make([]byte, 32*1024)
			n, err := conn.Read(buf)
			if n > 0 {
				u.chunks <- buf[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	return u
}

func (u *upstream) alive() bool {
	select {
	case <-u.dead:
		return len(u.chunks) > 0 // ended, but something is still to be delivered
	default:
		return true
	}
}

// pair copies between a kubelet connection and an e2e.test connection and closes both when one ends.
func pair(local net.Conn, u *upstream, verbose bool) {
	var once sync.Once
	closeBoth := func() { once.Do(func() { local.Close(); u.conn.Close() }) }
	go func() {
		defer closeBoth()
		for chunk := range u.chunks {
			if _, err := local.Write(chunk); err != nil {
				return
			}
		}
	}()
	go func() {
		defer closeBoth()
		_, _ = io.Copy(u.conn, local)
	}()
	if verbose {
		log.Printf("paired %s with %s", local.RemoteAddr(), u.conn.RemoteAddr())
	}
}

func listenUnix(endpoint string) (net.Listener, string, error) {
	path := strings.TrimPrefix(endpoint, "unix://")
	if path == "" || strings.Contains(path, "://") {
		return nil, "", fmt.Errorf("--endpoint %q: want a Unix socket path (optionally unix://PATH)", endpoint)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, "", err
	}
	// a socket left by an earlier run (killing a proxy does not unlink it) would make bind fail
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return nil, "", err
	}
	l, err := net.Listen("unix", path)
	return l, path, err
}

func listenTCP(endpoint string) (net.Listener, error) {
	addr, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return nil, fmt.Errorf("--proxy-endpoint %q: want tcp://[HOST]:PORT", endpoint)
	}
	return net.Listen("tcp", addr)
}

func main() {
	endpoint := flag.String("endpoint", "", "Unix socket the kubelet connects to")
	proxyEndpoint := flag.String("proxy-endpoint", "", "tcp://[HOST]:PORT that e2e.test port-forwards to")
	verbosity := flag.Int("v", 0, "log verbosity (5 logs every pairing)")
	flag.Parse()
	log.SetFlags(log.Ldate | log.Ltime | log.Lmicroseconds)
	if *endpoint == "" || *proxyEndpoint == "" {
		fmt.Fprintln(os.Stderr, "hostpathplugin: only the proxy mode is offered: give --endpoint=PATH and --proxy-endpoint=tcp://:PORT")
		os.Exit(2)
	}
	remote, err := listenTCP(*proxyEndpoint)
	if err != nil {
		log.Fatalf("listen on %s: %v", *proxyEndpoint, err)
	}
	local, path, err := listenUnix(*endpoint)
	if err != nil {
		log.Fatalf("listen on %s: %v", *endpoint, err)
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		<-signals
		os.Remove(path)
		os.Exit(0)
	}()
	log.Printf("proxying %s <-> %s", path, remote.Addr())

	idle := make(chan *upstream, 128)
	go func() {
		for {
			conn, err := remote.Accept()
			if err != nil {
				log.Fatalf("accept on %s: %v", remote.Addr(), err)
			}
			idle <- accept(conn)
		}
	}()
	for {
		conn, err := local.Accept()
		if err != nil {
			log.Fatalf("accept on %s: %v", path, err)
		}
		for {
			u := <-idle // waits until e2e.test has a connection open
			if u.alive() {
				pair(conn, u, *verbosity >= 5)
				break
			}
			u.conn.Close()
		}
	}
}
