package luascripts

import (
	"strconv"
	"testing"
)

// formatCases are string.format calls whose replies must match a real
// Redis 7.0's byte for byte: C's printf behind Lua 5.1's checks.
var formatCases = []string{
	"return string.format('%99999999d', 1)",
	"return string.format('%100d', 1)",
	"return string.format('%1.100f', 1)",
	"return string.format('%------d', 1)",
	"return string.format('%-----d|', 1)",
	"return string.format('%z', 1)",
	"return string.format('%', 1)",
	"return string.format('abc%')",
	"return string.format('%d')",
	"return string.format('%d %d', 1)",
	"return string.format('%d', 'x')",
	"return string.format('%s', {})",
	"return string.format()",
	"return string.format('%l', 1)",
	"return {string.format('%d|%5d|%-5d|%05d|%+d|% d|%.3d|%8.3d|%-8.3d|%.0d|%i', 42, 42, 42, 42, 42, 42, 42, 42, 42, 0, -7)}",
	"return {string.format('%d|%d|%d|%d|%d|%d', 3.9, -3.9, 2^63, -2^63, 1/0, 0/0)}",
	"return {string.format('%x|%X|%#x|%#X|%08x|%#08x|%o|%#o|%#.0o|%u|%x|%x|%u|%x|%.0x', 255, 255, 255, 255, 255, 255, 8, 8, 0, 3, -1, 2^64, -1, 0/0, 0)}",
	"return {string.format('%c%c%c', 72, 105, 256 + 33), string.format('%5c|%-5c|', 65, 66), string.format('[%c]', 0), string.format('[%5c]', 0)}",
	"return {string.format('%e|%E|%.2e|%10.3e|%-12.1e|%+e|%#.0e|%.0e', 12345.678, 0.000123, 1/3, -5, 2, 3, 4, 5)}",
	"return {string.format('%f|%.2f|%10.3f|%-10.1f|%010.2f|%+.1f|% .1f|%#.0f|%.0f|%f', 3.14159, 2.5, -1/3, 7, -2.25, 1, 1, 2, 2.5, 1e20)}",
	"return {string.format('%g|%g|%g|%g|%g|%g|%g|%g|%.3g|%.10g|%#g|%#.3g|%G|%g|%.0g', 100000, 1e6, 1e-4, 1e-5, 0.1, 1/3, 123456789, 0, 1234.5, 1/3, 1, 1, 1e-10, -0.0, 0.5)}",
	"return {string.format('%f|%e|%g|%5.1f|%-6f|%+f|%E|%G|%05f', 1/0, -1/0, 0/0, 1/0, 1/0, 1/0, 1/0, 0/0, -1/0)}",
	"return {string.format('%s|%10s|%-10s|%.2s|%5.1s|%s|%s', 'abc', 'abc', 'abc', 'abc', 'abc', 12, 1/3)}",
	"return {string.format('%s', string.rep('x', 100)) == string.rep('x', 100), string.format('%5s', string.rep('y', 120)) == string.rep('y', 120), string.format('%.3s', string.rep('z', 120))}",
	"return {string.format('[%s]', 'a\\0b'), string.format('[%s]', 'a\\0' .. string.rep('b', 100)) == '[a\\0' .. string.rep('b', 100) .. ']'}",
	"return string.format('%q', 'a\"b\\\\c\\nd\\re\\0f\\1')",
	"return string.format('%5q|%-q', 'x', 'y')",
	"return string.format('%5.2%|%%')",
	"return string.format('%05s|%05c|%0-5d|%-05d', 'ab', 65, 1, 2)",
	"return string.format('a\\0b%dc', 1)",
	"return string.format(12, 1)",
	"return string.format('%d', '0x10')",
	"return ('%d-%s'):format(5, 'x')",
	"local ok, e = pcall(string.format, '%d', {}) return e",
}

// TestDifferentialFormat runs formatCases on a real redis-server and on
// the Runner and compares the raw replies.
func TestDifferentialFormat(t *testing.T) {
	sock := startRedis(t)
	d := &differ{r: New(Config{}), ctl: dialRESP(t, sock), data: dialRESP(t, sock)}
	d.ctl.mustDo(t, "HELLO", "2")
	for i, src := range formatCases {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			if got, want := d.run(t, src, nil, nil, 2); got != want {
				t.Errorf("%s\n got %q\nwant %q", src, got, want)
			}
		})
	}
}
