package tests

import (
	"fmt"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The sequential specification of the lock model (docs/architecture.md, the lock model) that the
// faults phase checks histories against with porcupine. Its keys come in
// groups of two (a multi-key acquire, MSETNX and DEL take both keys of a
// group and no other), and a history is checked group by group: the
// groups share nothing, so the whole history is linearizable exactly when
// each group's is (porcupine's partitioning). TTLs are long (far beyond
// the test), so expiry never happens: a key's state is its value and
// whether it has a TTL at all.

// modelKeyState is one key: absent, or a value with or without a TTL.
type modelKeyState struct {
	present bool
	val     string
	ttl     bool
}

// modelGroupState is the state of one group of two keys; it is
// comparable, so porcupine compares states with ==.
type modelGroupState [2]modelKeyState

// modelInput is one operation on a group.
type modelInput struct {
	group int
	kind  string // set setnx get del del2 exists pttl pexpire persist release extend acquire acquire2 msetnx multi
	key   int    // 0 or 1: the group's key the operation is about
	val   string
	cond  string // set: "", NX, XX, IFEQ; pexpire: "", NX, XX
	cmp   string // set IFEQ's value
	exp   string // set: "", PX, KEEPTTL
	get   bool   // set … GET
	// evalsha sends a script by SHA1 (EVALSHA) rather than by source.
	evalsha bool
}

// modelOutput is a reply in RESP2 bytes (a remaining time reduced to its
// class, ":-2", ":-1" or ":+"), or unknown: an error reply or no reply,
// an operation that may or may not have taken effect.
type modelOutput struct {
	unknown bool
	reply   string
}

// modelApply runs in on s as the memory backend would and returns the
// reply and the new state.
func modelApply(s modelGroupState, in modelInput) (string, modelGroupState) {
	const ok, null, zero, one = "+OK\r\n", "$-1\r\n", ":0\r\n", ":1\r\n"
	bulk := func(v string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(v), v) }
	k := &s[in.key]
	switch in.kind {
	case "set":
		write := map[string]bool{
			"":     true,
			"NX":   !k.present,
			"XX":   k.present,
			"IFEQ": k.present && k.val == in.cmp,
		}[in.cond]
		reply := ok
		if in.get {
			reply = null
			if k.present {
				reply = bulk(k.val)
			}
		} else if !write {
			reply = null
		}
		if write {
			ttl := in.exp == "PX" || (in.exp == "KEEPTTL" && k.present && k.ttl)
			*k = modelKeyState{present: true, val: in.val, ttl: ttl}
		}
		return reply, s
	case "setnx":
		if k.present {
			return zero, s
		}
		*k = modelKeyState{present: true, val: in.val}
		return one, s
	case "get":
		if !k.present {
			return null, s
		}
		return bulk(k.val), s
	case "del", "exists":
		n := 0
		if k.present {
			n = 1
		}
		if in.kind == "del" {
			*k = modelKeyState{}
		}
		return fmt.Sprintf(":%d\r\n", n), s
	case "del2":
		n := 0
		for i := range s {
			if s[i].present {
				n++
			}
			s[i] = modelKeyState{}
		}
		return fmt.Sprintf(":%d\r\n", n), s
	case "pttl":
		switch {
		case !k.present:
			return ":-2\r\n", s
		case !k.ttl:
			return ":-1\r\n", s
		}
		return ":+\r\n", s
	case "pexpire":
		if !k.present || (in.cond == "NX" && k.ttl) || (in.cond == "XX" && !k.ttl) {
			return zero, s
		}
		k.ttl = true
		return one, s
	case "persist":
		if !k.present || !k.ttl {
			return zero, s
		}
		k.ttl = false
		return one, s
	case "release":
		if !k.present || k.val != in.val {
			return zero, s
		}
		*k = modelKeyState{}
		return one, s
	case "extend":
		if !k.present || k.val != in.val {
			return zero, s
		}
		k.ttl = true
		return one, s
	case "acquire":
		if k.present {
			return zero, s
		}
		*k = modelKeyState{present: true, val: in.val, ttl: true}
		return one, s
	case "acquire2", "msetnx":
		if s[0].present || s[1].present {
			return zero, s
		}
		s[0] = modelKeyState{present: true, val: in.val, ttl: in.kind == "acquire2"}
		s[1] = s[0]
		if in.kind == "acquire2" {
			return ":2\r\n", s
		}
		return one, s
	case "multi":
		// MULTI; SETNX k v; PEXPIRE k ttl; EXEC: the PEXPIRE applies
		// whoever holds the key (the pattern's known weakness).
		r := zero
		if !k.present {
			r = one
			*k = modelKeyState{present: true, val: in.val}
		}
		k.ttl = true
		return "*2\r\n" + r + one, s
	}
	panic("model: unknown operation " + in.kind)
}

// modelPorcupine is the model porcupine checks. An operation with an
// unknown outcome took effect or did not: its step leads to both states
// (porcupine follows the set of states a prefix may leave), and the
// recorder extends its return by the time it may still take effect late
// (modelLateEffect).
var modelPorcupine = (&porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[int][]porcupine.Operation{}
		var order []int
		for _, op := range history {
			g := op.Input.(modelInput).group
			if _, ok := by[g]; !ok {
				order = append(order, g)
			}
			by[g] = append(by[g], op)
		}
		var parts [][]porcupine.Operation
		for _, g := range order {
			parts = append(parts, by[g])
		}
		return parts
	},
	Init: func() []any { return []any{modelGroupState{}} },
	Step: func(state, input, output any) []any {
		s := state.(modelGroupState)
		want, next := modelApply(s, input.(modelInput))
		switch out := output.(modelOutput); {
		case out.unknown && next != s:
			return []any{s, next}
		case out.unknown || out.reply == want:
			return []any{next}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(modelInput), output.(modelOutput)
		r := "?"
		if !out.unknown {
			r = strings.TrimSuffix(out.reply, "\r\n")
		}
		return fmt.Sprintf("%s k%d %q %s%s%s → %q", in.kind, in.key, in.val, in.cond, in.cmp, in.exp, r)
	},
	DescribeState: func(state any) string {
		s := state.(modelGroupState)
		return fmt.Sprintf("%+v", [2]modelKeyState(s))
	},
}).ToModel()
