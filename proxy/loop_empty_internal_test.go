package proxy

import "testing"

// TestLoopNextSkipsEmptyCount: the loop's reader takes a count of 0 or less
// as no command, as Redis does, also when framing could not blank it (the
// line began in an earlier read).
func TestLoopNextSkipsEmptyCount(t *testing.T) {
	lc := &loopConn{}
	for _, in := range []string{"*-10\r\nPING\r\n", "*0\r\nPING\r\n", "*-1\r\n"} {
		args, n, err := lc.next([]byte(in))
		if err != nil || len(args) != 0 || in[n-1] != '\n' || n > len("*-10\r\n") {
			t.Errorf("next(%q) = %q, %d, %v; want no command and the count line used", in, args, n, err)
		}
	}
}
