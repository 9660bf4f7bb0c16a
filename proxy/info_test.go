package proxy_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/proxy"
)

// TestInfoSections: INFO has the Memory, CPU and Errorstats sections that
// exporters and test harnesses read, with Redis's field names; errors are
// counted by code as redis-server 7.0 counts them (a script's error_reply
// names its own code).
func TestInfoSections(t *testing.T) {
	s := startMemory(t, proxy.Config{})
	c := redis.NewClient(&redis.Options{Addr: s.addr, Protocol: 2})
	defer c.Close()
	ctx := t.Context()
	c.Eval(ctx, "return redis.error_reply('MYERR boom')", nil)
	c.Do(ctx, "FOO")
	c.Do(ctx, "GET")
	errs, err := c.Info(ctx, "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Errorstats\r\n", "errorstat_ERR:count=2\r\n", "errorstat_MYERR:count=1\r\n"} {
		if !strings.Contains(errs, want) {
			t.Errorf("INFO errorstats = %q; want it to hold %q", errs, want)
		}
	}
	if stats := c.Info(ctx, "stats").Val(); !strings.Contains(stats, "total_error_replies:3\r\n") {
		t.Errorf("INFO stats = %q; want total_error_replies:3", stats)
	}
	all := c.Info(ctx).Val()
	for _, field := range []string{`used_memory:[1-9]\d*`, `used_memory_human:\d+\.\d\d[KMG]`, `used_memory_rss:[1-9]\d*`,
		`number_of_cached_scripts:1`, `maxmemory_policy:noeviction`, `used_cpu_user:\d+\.\d{6}`, `used_cpu_sys:\d+\.\d{6}`} {
		if !regexp.MustCompile(`(?m)^` + field + "\r$").MatchString(all) {
			t.Errorf("INFO lacks a line %s", field)
		}
	}
}
