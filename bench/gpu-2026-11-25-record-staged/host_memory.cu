// microbench: host memory first touch, pinning, and device copies
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
static double now(){timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static const size_t G = (size_t)1 << 30;
static unsigned char* fresh(int huge){void*p; posix_memalign(&p,2<<20,G); if(huge) madvise(p,G,MADV_HUGEPAGE); return (unsigned char*)p;}
struct J{unsigned char*p;size_t n;};
static void* touch(void*a){J*j=(J*)a; memset(j->p,1,j->n); return 0;}
static double touch_par(unsigned char*p,int t){double t0=now(); pthread_t th[16]; J j[16]; size_t s=G/t; for(int i=0;i<t;i++){j[i]={p+i*s,s}; pthread_create(&th[i],0,touch,&j[i]);} for(int i=0;i<t;i++) pthread_join(th[i],0); return now()-t0;}
int main(){
  cudaFree(0);
  unsigned char*d; cudaMalloc(&d,G); cudaMemset(d,3,G); cudaDeviceSynchronize();
  unsigned char*a=fresh(1); printf("touch 1 GiB, 1 thread, THP advised: %.3f s\n", touch_par(a,1));
  unsigned char*b=fresh(1); printf("touch 1 GiB, 8 threads, THP advised: %.3f s\n", touch_par(b,8));
  unsigned char*c=fresh(0); printf("touch 1 GiB, 8 threads, no advice: %.3f s\n", touch_par(c,8));
  double t0=now(); cudaHostRegister(a,G,0); printf("register 1 GiB touched: %.3f s\n", now()-t0);
  t0=now(); cudaMemcpy(a,d,G,cudaMemcpyDeviceToHost); printf("D2H 1 GiB pinned: %.3f s\n", now()-t0);
  t0=now(); cudaHostUnregister(a); printf("unregister 1 GiB: %.3f s\n", now()-t0);
  unsigned char*e=fresh(1); t0=now(); cudaHostRegister(e,G,0); printf("register 1 GiB fresh: %.3f s\n", now()-t0);
  t0=now(); cudaMemcpy(b,d,G,cudaMemcpyDeviceToHost); printf("D2H 1 GiB pageable touched: %.3f s\n", now()-t0);
  unsigned char*f=fresh(1); t0=now(); cudaMemcpy(f,d,G,cudaMemcpyDeviceToHost); printf("D2H 1 GiB pageable fresh: %.3f s\n", now()-t0);
  t0=now(); cudaMemcpy(d,b,G,cudaMemcpyHostToDevice); printf("H2D 1 GiB pageable: %.3f s\n", now()-t0);
  unsigned char*h; t0=now(); cudaHostAlloc((void**)&h,G,0); printf("cudaHostAlloc 1 GiB: %.3f s\n", now()-t0);
  t0=now(); cudaMemcpy(h,d,G,cudaMemcpyDeviceToHost); printf("D2H 1 GiB into cudaHostAlloc: %.3f s\n", now()-t0);
  t0=now(); memcpy(b,h,G); printf("memcpy 1 GiB pinned->touched, 1 thread: %.3f s\n", now()-t0);
  t0=now(); cudaFreeHost(h); printf("cudaFreeHost 1 GiB: %.3f s\n", now()-t0);
  FILE*fp=fopen("/sys/kernel/mm/transparent_hugepage/enabled","r"); char s[256]={0}; if(fp){fgets(s,255,fp);fclose(fp);} printf("THP: %s", s);
  fp=fopen("/sys/kernel/mm/transparent_hugepage/defrag","r"); s[0]=0; if(fp){fgets(s,255,fp);fclose(fp);} printf("THP defrag: %s", s);
  t0=now(); return 0;
}
