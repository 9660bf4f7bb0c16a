package luascripts

import (
	"strings"

	"github.com/yuin/gopher-lua/ast"
	"github.com/yuin/gopher-lua/parse"
)

// RenamePublishCalls returns src with every use of redis.call and
// redis.pcall that may send PUBLISH renamed to call and pcall: a call whose
// command is the literal "publish" or is not a string literal (a name
// chosen at run time), and the functions taken as values. A call of any
// other literal command is left as it is, so that an error it raises names
// its own line, as in Redis. Every line stays where it was. ok is false
// when src cannot be scanned.
//
// For a backend that runs scripts on Redis nodes and must hold their
// messages back (quorum/scriptpub.go). Not renamed: redis reached another
// way (redis["call"], a local named redis).
func RenamePublishCalls(src, call, pcall string) (out string, ok bool) {
	toks, ok := tokens(src)
	if !ok {
		return src, false
	}
	starts := lineStarts(src)
	offset := func(p ast.Position) int { return starts[p.Line-1] + p.Column - 1 }
	var b strings.Builder
	last := 0
	for i := 0; i+2 < len(toks); i++ {
		t0, t1, t2 := toks[i], toks[i+1], toks[i+2]
		if t0.Type != parse.TIdent || t0.Str != "redis" || t1.Type != '.' || t2.Type != parse.TIdent || (t2.Str != "call" && t2.Str != "pcall") {
			continue
		}
		if i > 0 && (toks[i-1].Type == '.' || toks[i-1].Type == ':') {
			continue // a field named redis
		}
		if i+5 < len(toks) && toks[i+3].Type == '(' && toks[i+4].Type == parse.TString &&
			(toks[i+5].Type == ',' || toks[i+5].Type == ')') && !strings.EqualFold(toks[i+4].Str, "publish") {
			continue // a literal command that is not PUBLISH
		}
		name := call
		if t2.Str == "pcall" {
			name = pcall
		}
		from, to := offset(t0.Pos), offset(t2.Pos)+len(t2.Str)
		b.WriteString(src[last:from])
		b.WriteString(name)
		b.WriteString(strings.Repeat("\n", t2.Pos.Line-t0.Pos.Line)) // the lines the span had
		last = to
		i += 2
	}
	b.WriteString(src[last:])
	return b.String(), true
}

// tokens scans src with gopher-lua's scanner (comments and strings are
// tokens or nothing, never text that looks like a call).
func tokens(src string) ([]ast.Token, bool) {
	sc := parse.NewScanner(strings.NewReader(blankShebang(src)), "user_script")
	lx := &parse.Lexer{}
	var out []ast.Token
	for {
		t, err := sc.Scan(lx)
		if err != nil {
			return nil, false
		}
		if t.Type == parse.EOF {
			return out, true
		}
		lx.PrevTokenType = t.Type
		out = append(out, t)
	}
}

// lineStarts returns the offset of each line of src, counting line ends
// as gopher-lua's scanner (and Lua's) does: "\n", "\r", "\r\n" and "\n\r"
// each end one line.
func lineStarts(src string) []int {
	starts := []int{0}
	for i := 0; i < len(src); i++ {
		c := src[i]
		if c != '\n' && c != '\r' {
			continue
		}
		if i+1 < len(src) && (src[i+1] == '\n' || src[i+1] == '\r') && src[i+1] != c {
			i++
		}
		starts = append(starts, i+1)
	}
	return starts
}
