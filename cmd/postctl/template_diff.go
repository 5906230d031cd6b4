package main

import (
	"fmt"
	"strings"
)

// diffContext is the number of unchanged lines around each change of a
// unified diff.
const diffContext = 3

// diffMaxCells bounds the table of the longest-common-subsequence search
// (lines of a times lines of b); larger inputs are diffed as one
// replacement.
const diffMaxCells = 16 << 20

// diffOp is one line of an edit script: ' ' kept, '-' removed, '+' added.
type diffOp struct {
	kind byte
	line string
}

// splitLines splits s into lines without their "\n"; "" has none.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.Split(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// editScript turns a into b with the fewest removed and added lines (a
// longest common subsequence of lines).
func editScript(a, b []string) []diffOp {
	// Common prefix and suffix need no table.
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var ops []diffOp
	for _, l := range a[:pre] {
		ops = append(ops, diffOp{' ', l})
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	n, m := len(ma), len(mb)
	if n*m > diffMaxCells {
		for _, l := range ma {
			ops = append(ops, diffOp{'-', l})
		}
		for _, l := range mb {
			ops = append(ops, diffOp{'+', l})
		}
	} else {
		// lcs[i][j] is the LCS length of ma[i:] and mb[j:].
		lcs := make([][]int32, n+1)
		for i := range lcs {
			lcs[i] = make([]int32, m+1)
		}
		for i := n - 1; i >= 0; i-- {
			for j := m - 1; j >= 0; j-- {
				if ma[i] == mb[j] {
					lcs[i][j] = lcs[i+1][j+1] + 1
				} else {
					lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
				}
			}
		}
		i, j := 0, 0
		for i < n || j < m {
			switch {
			case i < n && j < m && ma[i] == mb[j]:
				ops = append(ops, diffOp{' ', ma[i]})
				i, j = i+1, j+1
			case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
				ops = append(ops, diffOp{'-', ma[i]})
				i++
			default:
				ops = append(ops, diffOp{'+', mb[j]})
				j++
			}
		}
	}
	for _, l := range a[len(a)-suf:] {
		ops = append(ops, diffOp{' ', l})
	}
	return ops
}

// unifiedDiff returns the unified diff of a and b with headers naming them,
// or "" when they are equal.
func unifiedDiff(nameA, nameB, a, b string) string {
	if a == b {
		return ""
	}
	ops := editScript(splitLines(a), splitLines(b))
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", nameA, nameB)
	// posA[k] and posB[k] are the line numbers (0-based) before ops[k].
	posA, posB := make([]int, len(ops)+1), make([]int, len(ops)+1)
	for k, op := range ops {
		posA[k+1], posB[k+1] = posA[k], posB[k]
		if op.kind != '+' {
			posA[k+1]++
		}
		if op.kind != '-' {
			posB[k+1]++
		}
	}
	for k := 0; k < len(ops); {
		if ops[k].kind == ' ' {
			k++
			continue
		}
		// A hunk starts diffContext lines before this change and grows
		// while the next change is within 2*diffContext kept lines.
		start := max(0, k-diffContext)
		end := k
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == ' ' {
				run++
			}
			if run == len(ops) || run-end > 2*diffContext {
				end = min(end+diffContext, len(ops))
				break
			}
			end = run
		}
		lenA, lenB := posA[end]-posA[start], posB[end]-posB[start]
		fmt.Fprintf(&sb, "@@ -%s +%s @@\n", hunkRange(posA[start], lenA), hunkRange(posB[start], lenB))
		for _, op := range ops[start:end] {
			sb.WriteByte(op.kind)
			sb.WriteString(op.line)
			sb.WriteByte('\n')
		}
		k = end
	}
	return sb.String()
}

// hunkRange is a hunk's "start,length" in unified diff form (1-based; an
// empty range names the line before it).
func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}
