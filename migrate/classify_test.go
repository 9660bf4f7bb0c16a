package migrate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/luascripts"
)

// TestClassify runs every lock library script of tests/testdata/scripts on
// the empty sandbox: the acquiring ones create their keys (with the token
// as value), the others (release, extend, reacquire, PTTL) create none.
func TestClassify(t *testing.T) {
	b := &Backend{cfg: Config{}.withDefaults()}
	acquiring := map[string]bool{
		"redislock-obtain.lua": true, "redislock094-obtain.lua": true,
		"redlock4-acquire.lua": true, "redlock5-acquire.lua": true,
		"redsync-touch-setnx.lua": true, // extend that takes the lock when it is free
	}
	files, err := filepath.Glob(filepath.Join("..", "tests", "testdata", "scripts", "*.lua"))
	if err != nil || len(files) < 10 {
		t.Fatalf("scripts: %v, %d files", err, len(files))
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(f)
		s := backend.Script{SHA1: luascripts.SHA1(string(src)), Src: string(src)}
		keys := []string{"lock:a", "lock:b"}
		args := [][]byte{[]byte("tok"), []byte("3"), []byte("10000"), []byte("0")}
		if strings.HasPrefix(name, "redlock") {
			args = [][]byte{[]byte("tok"), []byte("10000")}
		}
		p := b.classify(t.Context(), 0, s, keys, args, false)
		if got := len(p.creates) > 0; got != acquiring[name] {
			t.Errorf("%s: creates %v; want acquiring %v", name, p.creates, acquiring[name])
		}
		for k, v := range p.creates {
			if string(v) != "tok" {
				t.Errorf("%s creates %s = %q; want the token", name, k, v)
			}
		}
		if len(p.watch) < 1 || p.watch[0] != "lock:a" {
			t.Errorf("%s: watch %v; want the declared keys first", name, p.watch)
		}
	}
	// A transaction declares no KEYS: its keys come from the run.
	exec := `local out, i = {}, 1
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  out[#out + 1] = redis.pcall(unpack(ARGV, i + 1, i + n))
  i = i + n + 1
end
return out`
	s := backend.Script{SHA1: luascripts.SHA1(exec), Src: exec}
	argv := func(words ...string) [][]byte {
		out := make([][]byte, len(words))
		for i, w := range words {
			out[i] = []byte(w)
		}
		return out
	}
	p := b.classify(t.Context(), 0, s, nil, argv("3", "setnx", "k", "tok", "3", "expire", "k", "10"), false)
	if string(p.creates["k"]) != "tok" || len(p.watch) != 1 {
		t.Errorf("MULTI SETNX EXPIRE: creates %v, watch %v; want k created with tok", p.creates, p.watch)
	}
	p = b.classify(t.Context(), 0, s, nil, argv("2", "get", "k", "2", "del", "j"), false)
	if len(p.creates) != 0 || len(p.watch) != 2 {
		t.Errorf("MULTI GET DEL: creates %v, watch %v; want no acquire, k and j watched", p.creates, p.watch)
	}
	if p := b.classify(t.Context(), 0, s, nil, argv("3", "setnx", "k", "tok"), true); len(p.creates) != 0 {
		t.Errorf("a read-only run creates %v; want nothing", p.creates)
	}
}

func TestDirectClients(t *testing.T) {
	list := "id=3 addr=127.0.0.1:5 laddr=x fd=8 name=lockproxy-migrate age=9 idle=0 flags=N cmd=client|list\n" +
		"id=4 addr=127.0.0.1:6 laddr=x fd=9 name= age=30 idle=12 flags=N cmd=get\n" +
		"id=5 addr=127.0.0.1:7 laddr=x fd=10 name=app age=30 idle=4 flags=N cmd=set\n" +
		"id=6 addr=127.0.0.1:8 laddr=x fd=11 name= age=30 idle=0 flags=S cmd=replconf\n"
	if n, idle := directClients(list, "lockproxy-migrate"); n != 2 || idle != 4 {
		t.Errorf("directClients = %d, idle %d; want 2 (lockproxy's and the replica left out), idle 4", n, idle)
	}
	if n, _ := directClients("", "lockproxy-migrate"); n != 0 {
		t.Errorf("directClients of an empty list = %d", n)
	}
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Legacy
		bad  string
	}{
		{in: "redis://legacy:6379", want: Legacy{Addr: "legacy:6379", Host: "legacy"}},
		{in: "redis://legacy", want: Legacy{Addr: "legacy:6379", Host: "legacy"}},
		{in: "rediss://u:p@legacy:6380", want: Legacy{Addr: "legacy:6380", Host: "legacy", Username: "u", Password: "p", TLS: true}},
		{in: "redis://secret@legacy:6379", want: Legacy{Addr: "legacy:6379", Host: "legacy", Password: "secret"}},
		{in: "http://legacy:6379", bad: "is not a redis:// or rediss:// URL"},
		{in: "redis://legacy:6379/1", bad: "database"},
		{in: "redis://legacy:6379?db=1", bad: "options"},
	} {
		got, err := ParseURL(tc.in)
		switch {
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("ParseURL(%q) = %v; want an error with %q", tc.in, err, tc.bad)
		case tc.bad == "" && (err != nil || got != tc.want):
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for in, want := range map[string]string{
		"redis://u:p@legacy:6379":    "redis://u:xxxxx@legacy:6379",
		"redis://secret@legacy:6379": "redis://:xxxxx@legacy:6379",
		"redis://legacy:6379":        "redis://legacy:6379",
	} {
		if got := MaskURL(in); got != want || strings.Contains(got, "secret") {
			t.Errorf("MaskURL(%q) = %q; want %q", in, got, want)
		}
	}
}
