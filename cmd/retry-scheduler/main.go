// Command retry-scheduler will re-inject delayed jobs from the mail.retry.*
// delay topics into mail.jobs when they are due. Delay topics arrive with the
// failure-handling work (issue 3); until then the worker retries retryable
// failures in process, and this command only says so.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "retry-scheduler: not implemented yet: delay topics arrive with the failure-handling issue; "+
		"until then the worker retries retryable send failures in process")
	os.Exit(2)
}
