package luascripts

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/backend"
)

// TestRefusal: a script whose text can send a command lockproxy does not
// serve is refused with redis.call's error for the first such call in
// the text; lock scripts, and scripts whose commands cannot be read off
// the text, are not.
func TestRefusal(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"return redis.call('xadd', KEYS[1], '*', 'a', 1)", "ERR lockproxy serves lock commands only: 'xadd' is not supported script: %s, on @user_script:1."},
		{"local x = redis.call('get', KEYS[1])\nif x then\n  return redis.pcall('SORT', KEYS[1])\nend\nreturn redis.call('incr', 'n')",
			"ERR lockproxy serves lock commands only: 'sort' is not supported script: %s, on @user_script:3."},
		{"return redis.call('zadd', KEYS[1], 1, 'a')", ""},
		{"return redis.call('publish', KEYS[1], 'm')", "publish:"},
		{"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0", ""},
		{"return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])", ""},
		{"return redis.call(ARGV[1], KEYS[1])", ""}, // named at run time: not readable
		{"return redis.call('nosuchcommand')", ""},
		{"redis.call('set', KEYS[1], 1)\nreturn redis.call('FLUSHALL')", "ERR lockproxy does not run 'flushall' from scripts script: %s, on @user_script:2."}, // unknown to Redis too: the call's own error
	} {
		s := backend.Script{Src: tc.src, SHA1: SHA1(tc.src)}
		for _, publish := range []bool{false, true} {
			err := refusal(s, publish, false)
			want, pub := strings.CutPrefix(tc.want, "publish:")
			if want != "" {
				want = fmt.Sprintf(want, s.SHA1)
			} else if pub && !publish {
				want = "ERR lockproxy serves lock commands only: 'publish' is not supported script: " + s.SHA1 + ", on @user_script:1."
			}
			switch {
			case want == "" && err != nil:
				t.Errorf("%q (publish served: %v) refused: %v", tc.src, publish, err)
			case want != "" && (err == nil || err.Error() != want):
				t.Errorf("%q (publish served: %v): refusal %v; want %s", tc.src, publish, err, want)
			}
		}
	}
}

// TestMayPublish: a script may publish when its text calls PUBLISH or
// names its commands at run time; a release that publishes is still a
// release (a probe's PUBLISH answers 0, as quorum's wrap does).
func TestMayPublish(t *testing.T) {
	r := New(Config{})
	for src, want := range map[string]bool{
		"return redis.call('PUBLISH', KEYS[1], ARGV[1])":                                      true,
		"return redis.call(ARGV[1], KEYS[1])":                                                 true,
		"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end": false,
	} {
		if err, got := r.Refusal(backend.Script{Src: src}); err != nil || got != want {
			t.Errorf("Refusal(%q) = %v, publishes %v; want publishes %v", src, err, got, want)
		}
	}
	release := "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) redis.call('publish', KEYS[2], ARGV[2]) return 1 end return 0"
	if c := Classify(t.Context(), r, backend.Script{Src: release}, []string{"k", "ch"}, [][]byte{[]byte("tok"), []byte("m")}); c != Release {
		t.Errorf("a release that publishes is %v; want release", c)
	}
}

// TestRenamePublishCalls: the uses of redis.call and redis.pcall that may
// publish are renamed, the others and text in strings and comments are
// not, and no line moves, whatever the line ends.
func TestRenamePublishCalls(t *testing.T) {
	for src, want := range map[string]string{
		"return redis.call('get', KEYS[1])":                     "return redis.call('get', KEYS[1])",
		"return redis.call('PUBLISH', KEYS[1], 'm')":            "return C('PUBLISH', KEYS[1], 'm')",
		"x = 1\r\nreturn redis.pcall(ARGV[1])":                  "x = 1\r\nreturn P(ARGV[1])",
		"--\n\rlocal f = redis\r\n.call f('publish', 'a', 'b')": "--\n\rlocal f = C\n f('publish', 'a', 'b')",
		"local s = 'redis.call(ARGV[1])' -- redis.call(x)":      "local s = 'redis.call(ARGV[1])' -- redis.call(x)",
		"return t.redis.call(ARGV[1])":                          "return t.redis.call(ARGV[1])",
		"return redis.call 'publish'":                           "return C 'publish'",
		"return redis.call('get' .. 'x')":                       "return C('get' .. 'x')",
	} {
		if got, ok := RenamePublishCalls(src, "C", "P"); !ok || got != want {
			t.Errorf("RenamePublishCalls(%q) = %q, %v; want %q", src, got, ok, want)
		}
	}
}
