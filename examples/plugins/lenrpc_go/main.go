// lenrpc_go: the lenrpc protocol of examples/plugins/lenrpc.wat as a Go guest (ebtop ABI 1,
// docs/plugins.md). Go's wasip1 port imports WASI, so ebtop runs it only with
// --plugin-wasi-stubs (deterministic stubs). Build, then append the manifest (Go cannot emit a
// custom section):
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o lenrpc_go.raw.wasm .
//	cargo run --example plugin_manifest -- lenrpc_go.raw.wasm \
//	    'name=lenrpc_go\nabi=1\nkind=parse\nports=7878\n' lenrpc_go.wasm
//
// A message is a 4-byte big-endian length L of what follows, a type byte (1 request,
// 2 response), a 4-byte big-endian id; a request's body is "METHOD RESOURCE", a response's a
// status byte (0: ok) and optional text. Requests pair with responses by id.
package main

import (
	"encoding/binary"
	"unsafe"
)

const header = 96

// The buffer ebtop writes its header and the input into, and reads the answer from: a global,
// which Go's collector never moves.
var buf [65536]byte

//go:wasmexport ebtop_buffer
func ebtopBuffer() int32 { return int32(uintptr(unsafe.Pointer(&buf[0]))) }

//go:wasmexport ebtop_frame
func ebtopFrame(n int32) int64 {
	in := buf[header : header+int(n)]
	if len(in) < 9 {
		return 1<<56 | 9
	}
	l := binary.BigEndian.Uint32(in)
	if l < 5 || l > 1<<20 || (in[4] != 1 && in[4] != 2) {
		return -1
	}
	return int64(l - 5)
}

//go:wasmexport ebtop_message
func ebtopMessage(n int32) int32 {
	in := buf[header : header+int(n)]
	kind, id := in[4], binary.BigEndian.Uint32(in[5:9])
	body := append([]byte(nil), in[9:]...) // the answer is written over the input
	a := buf[:24]
	clear(a)
	binary.LittleEndian.PutUint64(a[8:], uint64(id)+1) // pairing key: id + 1 (0 is in order)
	if kind == 1 {
		m := len(body)
		for i, c := range body {
			if c == ' ' {
				m = i
				break
			}
		}
		if m > 64 {
			return -1
		}
		res := []byte{}
		if m < len(body) {
			res = body[m+1:]
		}
		if len(res) > 1024 {
			res = res[:1024]
		}
		a[0] = 1
		a[2] = 1 // one attribute: the body's length
		binary.LittleEndian.PutUint16(a[16:], uint16(m))
		binary.LittleEndian.PutUint16(a[18:], uint16(len(res)))
		out := append(buf[:24], body[:m]...)
		out = append(out, res...)
		v := itoa(len(body))
		out = append(out, byte(len("body_len")), 0, byte(len(v)), 0)
		out = append(out, "body_len"...)
		out = append(out, v...)
		return int32(len(out))
	}
	if len(body) < 1 {
		return -1
	}
	a[0] = 2
	if body[0] != 0 {
		a[1] = 2
	}
	a[3] = 1
	binary.LittleEndian.PutUint32(a[4:], uint32(body[0]))
	return 24
}

func itoa(v int) string {
	if v == 0 {
		return "0"
	}
	var d []byte
	for ; v > 0; v /= 10 {
		d = append([]byte{byte('0' + v%10)}, d...)
	}
	return string(d)
}

func main() {}
