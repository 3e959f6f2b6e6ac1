// kubeadm-coredns-check runs the CoreDNS checks of `kubeadm upgrade`'s
// preflight (kubeadm's own RunCoreDNSMigrationCheck, compiled from the same
// k8s.io/kubernetes module as the rig's kubeadm) against a live API server.
//
// The preflight phase of `kubeadm upgrade apply` cannot run on the test rig
// as a whole (it checks the host, creates a health-check Job and pulls
// images), but its CoreDNS checks only read the cluster: the
// kube-system/coredns ConfigMap's Corefile and the image tag of the
// Deployment labelled k8s-app=kube-dns, which kubeadm takes for the CoreDNS
// version it migrates the Corefile from. This tool runs exactly those checks,
// so that a test can say which image tags and Corefiles let an upgrade pass.
//
//	kubeadm-coredns-check -kubeconfig FILE [-ignore-preflight-errors a,b]
//
// Prints kubeadm's own messages; exits 0 when the checks pass, 1 when they
// fail (an API server that cannot be reached fails them too), 2 on a usage
// or kubeconfig error.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm/validation"
	kubeadmconstants "k8s.io/kubernetes/cmd/kubeadm/app/constants"
	"k8s.io/kubernetes/cmd/kubeadm/app/phases/upgrade"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster to check")
	ignore := flag.String("ignore-preflight-errors", "", "checks whose errors become warnings, as kubeadm's flag (comma-separated, or 'all')")
	flag.Parse()
	if *kubeconfig == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: kubeadm-coredns-check -kubeconfig FILE [-ignore-preflight-errors a,b]")
		os.Exit(2)
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubeconfig: %v\n", err)
		os.Exit(2)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fmt.Fprintf(os.Stderr, "client: %v\n", err)
		os.Exit(2)
	}
	var names []string
	if *ignore != "" {
		names = strings.Split(*ignore, ",")
	}
	// kubeadm's own reading of the flag (lower case, 'all' alone).
	ignored, err := validation.ValidateIgnorePreflightErrors(names, nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "-ignore-preflight-errors: %v\n", err)
		os.Exit(2)
	}
	// The version kubeadm migrates to, for the log of the test that runs this.
	fmt.Printf("target CoreDNS %s\n", kubeadmconstants.CoreDNSVersion)
	// Errors ignored become warnings, which kubeadm writes to stderr.
	if err := upgrade.RunCoreDNSMigrationCheck(client, ignored); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("CoreDNS preflight checks passed")
}
