/* A resolver client for the tests: getaddrinfo(NAME, AF_INET) as a
 * program linked against musl (or any libc) does it, reading
 * /etc/resolv.conf (search list, ndots). Prints the addresses on
 * success; the EAI_ code, exit status 2, on failure (as `getent`). */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    struct addrinfo hints, *res, *p;
    if (argc != 2) {
        fprintf(stderr, "usage: %s NAME\n", argv[0]);
        return 64;
    }
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(argv[1], NULL, &hints, &res);
    if (rc != 0) {
        printf("%d\n", rc);
        return 2;
    }
    for (p = res; p != NULL; p = p->ai_next) {
        char buf[INET_ADDRSTRLEN];
        const struct sockaddr_in *sin = (const struct sockaddr_in *)p->ai_addr;
        inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof buf);
        printf("%s ", buf);
    }
    printf("\n");
    freeaddrinfo(res);
    return 0;
}
