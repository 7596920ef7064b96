"""The kubelet, read from the node: pod-resources allocation (`client`, gRPC, loaded only
with the kubernetes collector), container names from its log layout (`logs`), and the
thread that refreshes both off the scrape and sample paths (`watch`)."""
