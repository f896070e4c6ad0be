// A goroutine-creation benchmark for bench/go_spawn_ab.py: creates goroutines that do
// nothing but end (`go func(){ wg.Done() }()`, 1,000 then a wait), and every 500 ms prints
// "SPAWNS NS" (goroutines created, nanoseconds taken) of that half second. It links
// crypto/tls (ebtop places its Go probes, goroutine creation's included, on programs that
// have it). Standard library only.
package main

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "tls" {
		// Never run: keeps crypto/tls's Conn.Read and Write in the binary.
		c := tls.Client(nil, &tls.Config{})
		c.Write(nil)
		c.Read(nil)
	}
	var wg sync.WaitGroup
	start, n := time.Now(), 0
	for {
		for i := 0; i < 1000; i++ {
			wg.Add(1)
			go func() { wg.Done() }()
		}
		wg.Wait()
		n += 1000
		if d := time.Since(start); d >= 500*time.Millisecond {
			fmt.Println(n, d.Nanoseconds())
			start, n = time.Now(), 0
		}
	}
}
