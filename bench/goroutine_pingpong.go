package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// Round trips between two goroutines over unbuffered channels: each is two goroutine switches.
func main() {
	n, _ := strconv.Atoi(os.Args[1])
	a, b := make(chan int), make(chan int)
	go func() {
		for v := range a {
			b <- v
		}
	}()
	t := time.Now()
	for i := 0; i < n; i++ {
		a <- i
		<-b
	}
	el := time.Since(t)
	fmt.Printf("%.1f\n", float64(el.Nanoseconds())/float64(2*n))
}
