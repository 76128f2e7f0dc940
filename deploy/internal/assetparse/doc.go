// Package assetparse reads the deployment assets the deploy tests check
// without Docker or Kubernetes at hand: Dockerfiles, shell command lines,
// .dockerignore patterns, image references, Kubernetes quantities and
// GOMEMLIMIT. Each parser covers what this repository's assets use and
// refuses the rest (heredocs, for one) rather than guess. Only tests import
// it.
package assetparse
