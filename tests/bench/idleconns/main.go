// Command idleconns opens N connections to each server, sends one PING on
// each (not with NOPING set), holds them for two seconds and prints the
// growth of the server process's resident memory (VmRSS in
// /proc/PID/status): what an idle client costs. tests/bench/idle.sh runs it.
//
//	idleconns N ADDR=PID [ADDR=PID ...]
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

func rss(pid string) int {
	b, _ := os.ReadFile("/proc/" + pid + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			n, _ := strconv.Atoi(strings.Fields(l)[1])
			return n
		}
	}
	return -1
}

func main() {
	n, _ := strconv.Atoi(os.Args[1])
	for _, ap := range os.Args[2:] {
		p := strings.SplitN(ap, "=", 2) // addr=pid
		before := rss(p[1])
		var conns []net.Conn
		for i := 0; i < n; i++ {
			c, err := net.Dial("tcp", p[0])
			if err != nil {
				fmt.Println("dial:", err)
				os.Exit(1)
			}
			if os.Getenv("NOPING") == "" {
				c.Write([]byte("PING\r\n"))
				r := bufio.NewReader(c)
				if _, err := r.ReadString('\n'); err != nil {
					fmt.Println("read:", err)
					os.Exit(1)
				}
			}
			conns = append(conns, c)
		}
		time.Sleep(2 * time.Second)
		after := rss(p[1])
		fmt.Printf("%s: %d idle connections: +%.1f MiB (%.0f bytes each)\n", p[0], n, float64(after-before)/1024, float64(after-before)*1024/float64(n))
		for _, c := range conns {
			c.Close()
		}
		time.Sleep(time.Second)
	}
}
