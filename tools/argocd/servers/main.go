// Command servers runs the three Argo CD servers the end-to-end tier and the sandbox start, the
// application controller, the repo-server and the API server (argocd-server: its API; the module
// holds no built web UI), plus the git credential helper the repo-server hands to git,
// and, as `argocd admin redis-initial-password`, a stand-in for the command of the argo-cd chart's
// redis-secret-init Job (redis_initial_password.go).
// It dispatches on ARGOCD_BINARY_NAME (or the name it was started as), like Argo CD's own
// multicall binary, but links only those commands: the CLI, Dex,
// notifications, the ApplicationSet controller (with its SCM provider clients) and the commit
// server are not compiled, which is most of a cold build's Go compilation (docs/toolchain.md).
// The commands themselves are Argo CD's, unchanged.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/klog/v2"

	appcontroller "github.com/argoproj/argo-cd/v3/cmd/argocd-application-controller/commands"
	gitaskpass "github.com/argoproj/argo-cd/v3/cmd/argocd-git-ask-pass/commands"
	reposerver "github.com/argoproj/argo-cd/v3/cmd/argocd-repo-server/commands"
	apiserver "github.com/argoproj/argo-cd/v3/cmd/argocd-server/commands"
	"github.com/argoproj/argo-cd/v3/cmd/util"
	"github.com/argoproj/argo-cd/v3/util/log"
)

func init() {
	// klog (client-go's logger) writes through Argo CD's configured logger, as in Argo CD's binary.
	klog.SetLogger(log.NewLogrusLogger(log.NewWithCurrentConfig()))
}

func main() {
	name := filepath.Base(os.Args[0])
	if v := os.Getenv("ARGOCD_BINARY_NAME"); v != "" {
		name = v
	}
	var err error
	switch name {
	case "argocd-application-controller":
		util.SetAutoMaxProcs(false)
		err = appcontroller.NewCommand().Execute()
	case "argocd-server":
		util.SetAutoMaxProcs(false)
		err = apiserver.NewCommand().Execute()
	case "argocd-repo-server":
		util.SetAutoMaxProcs(false)
		err = reposerver.NewCommand().Execute()
	case "argocd":
		// Only `argocd admin redis-initial-password` (redis_initial_password.go), the command of
		// the argo-cd chart's redis-secret-init Job.
		if len(os.Args) == 3 && os.Args[1] == "admin" && os.Args[2] == "redis-initial-password" {
			err = redisInitialPassword()
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		} else {
			fmt.Fprintln(os.Stderr, "argocd: this build runs only `argocd admin redis-initial-password`")
			os.Exit(2)
		}
	case "argocd-git-ask-pass":
		util.SetAutoMaxProcs(true)
		err = gitaskpass.NewCommand().Execute()
	default:
		fmt.Fprintf(os.Stderr, "%s: set ARGOCD_BINARY_NAME to argocd-application-controller, argocd-server, argocd-repo-server or argocd-git-ask-pass (this build holds only those)\n", name)
		os.Exit(2)
	}
	if err != nil {
		os.Exit(1)
	}
}
