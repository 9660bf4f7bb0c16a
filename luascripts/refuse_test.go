package luascripts

import (
	"fmt"
	"testing"

	"github.com/lockproxy/lockproxy/backend"
)

// TestRefusal: a script whose text can send a command lockproxy does not
// serve is refused with redis.call's error for the first such call in
// the text; lock scripts, and scripts whose commands cannot be read off
// the text, are not.
func TestRefusal(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"return redis.call('zadd', KEYS[1], 1, 'a')", "ERR lockproxy serves lock commands only: 'zadd' is not supported script: %s, on @user_script:1."},
		{"local x = redis.call('get', KEYS[1])\nif x then\n  return redis.pcall('HINCRBY', KEYS[1], 'f', 1)\nend\nreturn redis.call('incr', 'n')",
			"ERR lockproxy serves lock commands only: 'hincrby' is not supported script: %s, on @user_script:3."},
		{"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0", ""},
		{"return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])", ""},
		{"return redis.call(ARGV[1], KEYS[1])", ""}, // named at run time: not readable
		{"return redis.call('nosuchcommand')", ""},  // unknown to Redis too: the call's own error
	} {
		s := backend.Script{Src: tc.src, SHA1: SHA1(tc.src)}
		err := refusal(s)
		want := tc.want
		if want != "" {
			want = fmt.Sprintf(want, s.SHA1)
		}
		switch {
		case want == "" && err != nil:
			t.Errorf("%q refused: %v", tc.src, err)
		case want != "" && (err == nil || err.Error() != want):
			t.Errorf("%q: refusal %v; want %s", tc.src, err, want)
		}
	}
}
