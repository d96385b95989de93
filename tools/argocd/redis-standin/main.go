// Command redis-standin is a stand-in for redis-server in the end-to-end tier, used only when no
// redis-server (Debian's redis-server package) is on PATH: an in-memory Redis protocol server
// (github.com/alicebob/miniredis, the library Argo CD's own tests use for its cache) listening on
// 127.0.0.1:<port>. Argo CD uses Redis only as a cache; nothing here persists.
//
// Usage: redis-standin --port PORT
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/alicebob/miniredis/v2"
)

func main() {
	port := flag.Int("port", 0, "TCP port on 127.0.0.1")
	flag.Parse()
	if *port <= 0 {
		fmt.Fprintln(os.Stderr, "redis-standin: --port is required")
		os.Exit(2)
	}
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr(fmt.Sprintf("127.0.0.1:%d", *port)); err != nil {
		fmt.Fprintf(os.Stderr, "redis-standin: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("redis-standin: Ready to accept connections on %s\n", m.Addr())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	m.Close()
}
