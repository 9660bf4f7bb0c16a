package resp

import (
	"bytes"
	"testing"
)

// A quorum acquire's node reply ({1, had, cur} from the set script) and a
// HELLO 3 map: the shapes the hot and the setup paths decode.
var (
	benchAcquire = []byte("*3\r\n:1\r\n$0\r\n\r\n$36\r\n0d6f1a2e-8a3b-4c4d-9e5f-6a7b8c9d0e1f\r\n")
	benchHello   = []byte("%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:5\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n")
)

func BenchmarkDecode(b *testing.B) {
	for _, c := range []struct {
		name string
		in   []byte
	}{{"acquire", benchAcquire}, {"hello", benchHello}, {"int", []byte(":1\r\n")}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.in)))
			b.ReportAllocs()
			for b.Loop() {
				if _, n, err := Decode(c.in); n != len(c.in) || err != nil {
					b.Fatal(n, err)
				}
			}
		})
	}
}

// BenchmarkReader reads 64 pipelined replies per fill, as a node stream
// does under load.
func BenchmarkReader(b *testing.B) {
	stream := bytes.Repeat(benchAcquire, 64)
	src := bytes.NewReader(stream)
	r := NewReader(src, 32<<10)
	b.SetBytes(int64(len(benchAcquire)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%64 == 0 {
			src.Reset(stream)
		}
		if _, err := r.ReadValue(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendValue(b *testing.B) {
	v, _, _ := Decode(benchHello)
	for _, resp3 := range []bool{false, true} {
		name := map[bool]string{false: "resp2", true: "resp3"}[resp3]
		b.Run(name, func(b *testing.B) {
			buf := make([]byte, 0, 512)
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendValue(buf[:0], v, resp3)
			}
		})
	}
}

func BenchmarkRequest(b *testing.B) {
	token := []byte("0d6f1a2e-8a3b-4c4d-9e5f-6a7b8c9d0e1f")
	b.ReportAllocs()
	var r Request
	for b.Loop() {
		r = Request{B: r.B[:0]}
		r.Cmd(6)
		r.Arg("set")
		r.Arg("lock:key")
		r.ArgBytes(token)
		r.Arg("nx")
		r.Arg("px")
		r.ArgInt(30000)
	}
}
