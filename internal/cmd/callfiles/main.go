// Command callfiles lists the library's Go files that one call visits: it runs a host-tensor
// AddLayerNorm (f32, N×D, with bias) on an engine a few times untimed, clears the coverage
// counters, makes one more call and writes the counters, so that only that call's
// statements count. Build it with coverage over the library (scripts/call-files.sh does, and
// prints the files):
//
//	go build -cover -covermode=atomic -coverpkg=github.com/fusednorm/fusednorm/... -o callfiles ./internal/cmd/callfiles
//	GOCOVERDIR=exitdir ./callfiles -out dir && go tool covdata textfmt -i dir -o cover.txt
//
// The engine is the default one (auto) unless FUSEDNORM_BACKEND says otherwise; on a GPU
// machine the default shape goes to Dawn. The C runtime the call reaches (cgo/dawnrt.c) is
// not Go and is not counted.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime/coverage"

	fn "github.com/fusednorm/fusednorm"
)

func main() {
	n := flag.Int("n", 4096, "rows")
	d := flag.Int("d", 768, "row length")
	out := flag.String("out", os.Getenv("GOCOVERDIR"), "folder for the coverage counters of the one call")
	flag.Parse()
	eng, err := fn.Open()
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()
	vals := func(k int) []float32 {
		v := make([]float32, k)
		for i := range v {
			v[i] = float32(i%17)*0.25 - 2
		}
		return v
	}
	in := fn.AddLayerNormInputs{
		X1: fn.FromFloat32(vals(*n**d), *n, *d), X2: fn.FromFloat32(vals(*n**d), *n, *d),
		Gamma: fn.FromFloat32(vals(*d), *d), Beta: fn.FromFloat32(vals(*d), *d), Bias: fn.FromFloat32(vals(*d), *d),
	}
	var res fn.AddLayerNormOutputs
	call := func() {
		res = fn.AddLayerNormOutputs{}
		if err := eng.AddLayerNorm(context.Background(), in, &res); err != nil {
			log.Fatal(err)
		}
	}
	for range 5 {
		call()
	}
	if err := coverage.ClearCounters(); err != nil {
		log.Fatal(err)
	}
	call()
	if err := coverage.WriteCountersDir(*out); err != nil {
		log.Fatal(err)
	}
	if err := coverage.WriteMetaDir(*out); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("engine: %s\n", eng.Info())
}
