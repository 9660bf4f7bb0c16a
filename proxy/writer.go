package proxy

import (
	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/resp"
)

// appendValue renders v in RESP3 or RESP2 and appends it to b: the
// codec's encoder (package resp), under the name the front end calls.
func appendValue(b []byte, v backend.Value, resp3 bool) []byte { return resp.AppendValue(b, v, resp3) }
