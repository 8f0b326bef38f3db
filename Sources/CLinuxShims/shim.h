#ifndef CLINUXSHIMS_H
#define CLINUXSHIMS_H
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <malloc.h>
// accept4 is a GNU extension; the Glibc module is built without _GNU_SOURCE, so declare it.
extern int accept4(int sockfd, struct sockaddr *addr, socklen_t *addrlen, int flags);
#endif
