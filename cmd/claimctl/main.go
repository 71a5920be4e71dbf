package main

import (
	"os"

	"github.com/claimstore/claimstore/internal/cli"
)

func main() { os.Exit(cli.Main(nil)) }
