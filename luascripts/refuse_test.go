package luascripts

import (
	"fmt"
	strings2 "strings"
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
		{"return redis.call('zadd', KEYS[1], 1, 'a')", "strings:ERR lockproxy's backend serves string values only: 'zadd' is not supported yet script: %s, on @user_script:1."},
		{"local x = redis.call('incr', KEYS[1])\nreturn redis.pcall('HINCRBY', KEYS[1], 'f', 1)",
			"strings:ERR lockproxy's backend serves string values only: 'hincrby' is not supported yet script: %s, on @user_script:2."},
		{"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0", ""},
		{"return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])", ""},
		{"return redis.call(ARGV[1], KEYS[1])", ""}, // named at run time: not readable
		{"return redis.call('nosuchcommand')", ""},
		{"redis.call('set', KEYS[1], 1)\nreturn redis.call('FLUSHALL')", "ERR lockproxy does not run 'flushall' from scripts script: %s, on @user_script:2."}, // unknown to Redis too: the call's own error
	} {
		s := backend.Script{Src: tc.src, SHA1: SHA1(tc.src)}
		for _, strings := range []bool{false, true} {
			err := refusal(s, strings, false)
			want, onlyStrings := strings2.CutPrefix(tc.want, "strings:")
			if want != "" {
				want = fmt.Sprintf(want, s.SHA1)
			}
			if onlyStrings && !strings {
				want = "" // every command of the script is served
			}
			switch {
			case want == "" && err != nil:
				t.Errorf("%q (strings only: %v) refused: %v", tc.src, strings, err)
			case want != "" && (err == nil || err.Error() != want):
				t.Errorf("%q (strings only: %v): refusal %v; want %s", tc.src, strings, err, want)
			}
		}
	}
}
