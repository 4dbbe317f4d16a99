#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
static double now(){timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static const size_t G=(size_t)1<<30;
static size_t PIECE=8<<20;
struct St{unsigned char*buf;cudaEvent_t ev;cudaStream_t s;};
static St st[16];
struct C{unsigned char*host;unsigned char*dev;size_t n,next;int own;};
struct J{C*c;St*s;};
static void*work(void*p){J*j=(J*)p;C*c=j->c;for(;;){size_t off=__atomic_fetch_add(&c->next,PIECE,__ATOMIC_RELAXED);if(off>=c->n)break;size_t len=c->n-off<PIECE?c->n-off:PIECE;
 cudaStream_t s=c->own?j->s->s:cudaStreamLegacy; cudaMemcpyAsync(j->s->buf,c->dev+off,len,cudaMemcpyDeviceToHost,s); cudaEventRecord(j->s->ev,s); cudaEventSynchronize(j->s->ev); memcpy(c->host+off,j->s->buf,len);}return 0;}
static double staged(unsigned char*h,unsigned char*d,size_t n,int t,int own){double t0=now();C c={h,d,n,0,own};pthread_t th[16];J j[16];for(int i=0;i<t;i++){j[i]={&c,&st[i]};if(i)pthread_create(&th[i],0,work,&j[i]);}work(&j[0]);for(int i=1;i<t;i++)pthread_join(th[i],0);return now()-t0;}
static unsigned char*fresh(){void*p;posix_memalign(&p,2<<20,G);madvise(p,G,MADV_HUGEPAGE);return (unsigned char*)p;}
int main(){cudaFree(0);unsigned char*d;cudaMalloc(&d,G);cudaMemset(d,3,G);cudaDeviceSynchronize();
 for(int i=0;i<16;i++){cudaHostAlloc((void**)&st[i].buf,32<<20,0);cudaEventCreateWithFlags(&st[i].ev,cudaEventDisableTiming);cudaStreamCreateWithFlags(&st[i].s,cudaStreamNonBlocking);}
 unsigned char*a=fresh(); memset(a,0,G);
 double t0=now();cudaMemcpy(a,d,G,cudaMemcpyDeviceToHost);printf("direct pageable touched: %.3f s\n",now()-t0);
 int ts[]={1,2,4,8,15};
 for(int k=0;k<5;k++) printf("staged touched 8MiB legacy t=%d: %.3f s\n",ts[k],staged(a,d,G,ts[k],0));
 for(int k=0;k<5;k++) printf("staged touched 8MiB own streams t=%d: %.3f s\n",ts[k],staged(a,d,G,ts[k],1));
 PIECE=32<<20; printf("staged touched 32MiB own t=8: %.3f s\n",staged(a,d,G,8,1)); PIECE=2<<20; printf("staged touched 2MiB own t=8: %.3f s\n",staged(a,d,G,8,1)); PIECE=8<<20;
 unsigned char*b=fresh(); printf("staged fresh 8MiB own t=8: %.3f s\n",staged(b,d,G,8,1));
 unsigned char*c=fresh(); t0=now();cudaMemcpy(c,d,G,cudaMemcpyDeviceToHost);printf("direct pageable fresh: %.3f s\n",now()-t0);
 t0=now();cudaHostRegister(a,G,0);double r=now()-t0;t0=now();cudaMemcpy(a,d,G,cudaMemcpyDeviceToHost);printf("register touched %.3f s, pinned copy %.3f s\n",r,now()-t0);
 t0=now();memcpy(b,c,G);printf("memcpy touched->touched 1 thread %.3f\n",now()-t0);
 // 32 MiB regions, many: like many_buffers
 t0=now(); for(int i=0;i<32;i++) staged(b+i*(32<<20),d+i*(32<<20),32<<20,4,1); printf("32 x 32MiB staged own: %.3f s\n",now()-t0);
 t0=now(); for(int i=0;i<32;i++) cudaMemcpy(b+i*(32<<20),d+i*(32<<20),32<<20,cudaMemcpyDeviceToHost); printf("32 x 32MiB direct pageable: %.3f s\n",now()-t0);
 return 0;}
