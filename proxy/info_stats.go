package proxy

import (
	"bytes"
	"fmt"
	"os"
	rtmetrics "runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// The figures of INFO's Memory, CPU and Errorstats sections, which
// exporters and clients read (used_memory, used_cpu_user, errorstat_*).

// maxErrorCodes bounds the error codes Errorstats keeps: a script's
// redis.error_reply names its own, and a client must not grow the table
// without end (Redis 7.0 keeps every one). Past it, errors still count in
// total_error_replies.
const maxErrorCodes = 128

// errorStats counts the error replies sent, by code, as Redis's
// afterErrorReply does. Safe for concurrent use.
type errorStats struct {
	total  atomic.Int64
	mu     sync.Mutex
	byCode map[string]int64
}

// add counts one error reply (its text without the '-'): the code is
// the text up to the first space within 32 bytes, or ERR.
func (e *errorStats) add(reply []byte) {
	e.total.Add(1)
	code := "ERR"
	if i := bytes.IndexByte(reply[:min(len(reply), 31)], ' '); i > 0 {
		code = string(reply[:i])
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.byCode == nil {
		e.byCode = map[string]int64{}
	}
	if _, ok := e.byCode[code]; ok || len(e.byCode) < maxErrorCodes {
		e.byCode[code]++
	}
}

// lines is the Errorstats section, codes in order.
func (e *errorStats) lines() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for code, n := range e.byCode {
		out = append(out, "errorstat_"+infoSafe.Replace(code)+":count="+strconv.FormatInt(n, 10))
	}
	slices.Sort(out)
	return out
}

// infoSafe keeps a value from breaking INFO's lines and fields.
var infoSafe = strings.NewReplacer(":", "_", "\r", "_", "\n", "_", " ", "_")

// memoryLines is INFO's Memory section: the Go heap in use as
// used_memory, the process's resident set as used_memory_rss.
func memoryLines(cachedScripts int) []string {
	sample := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/total:bytes"}}
	rtmetrics.Read(sample)
	used, total := int64(sample[0].Value.Uint64()), int64(sample[1].Value.Uint64())
	rss := residentBytes()
	return []string{
		"used_memory:" + strconv.FormatInt(used, 10),
		"used_memory_human:" + humanBytes(used),
		"used_memory_rss:" + strconv.FormatInt(rss, 10),
		"used_memory_rss_human:" + humanBytes(rss),
		"allocator_allocated:" + strconv.FormatInt(used, 10),
		"allocator_resident:" + strconv.FormatInt(total, 10),
		"number_of_cached_scripts:" + strconv.Itoa(cachedScripts),
		"maxmemory:0",
		"maxmemory_human:0B",
		"maxmemory_policy:noeviction",
		"mem_allocator:go",
	}
}

// residentBytes is the process's resident set (Linux), or 0.
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// humanBytes is Redis's bytesToHuman: 1.04M.
func humanBytes(n int64) string {
	switch f := float64(n); {
	case n < 1024:
		return strconv.FormatInt(n, 10) + "B"
	case n < 1<<20:
		return fmt.Sprintf("%.2fK", f/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.2fM", f/(1<<20))
	default:
		return fmt.Sprintf("%.2fG", f/(1<<30))
	}
}

// cpuLines is INFO's CPU section, from the process's rusage (lockproxy has
// no main thread apart: the process's figures stand for it too).
func cpuLines() []string {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	secs := func(tv syscall.Timeval) string {
		return strconv.FormatFloat(float64(tv.Sec)+float64(tv.Usec)/1e6, 'f', 6, 64)
	}
	sys, user := secs(ru.Stime), secs(ru.Utime)
	return []string{
		"used_cpu_sys:" + sys,
		"used_cpu_user:" + user,
		"used_cpu_sys_children:0.000000",
		"used_cpu_user_children:0.000000",
		"used_cpu_sys_main_thread:" + sys,
		"used_cpu_user_main_thread:" + user,
	}
}
