// Command libonly uses the library and nothing else: TestLibraryEmbedsOnlyManifests links
// it and looks for the ops' JSON files in the binary.
package main

import (
	"fmt"
	"os"

	"github.com/fusednorm/fusednorm"
)

func main() {
	e, err := fusednorm.Open()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer e.Close()
	for _, name := range fusednorm.KernelNames() {
		k, err := e.GetKernel(name, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(k.Manifest().Name)
	}
}
